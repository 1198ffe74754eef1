"""Type aliases every layer may use: JSON values and run ids (imports nothing of ours)."""

from __future__ import annotations

import uuid
from typing import Any, TypeAlias

#: A value the engine builds or reads itself and stores as JSON: error dicts, graph
#: drawings, summaries. Code that looks inside one narrows it with ``isinstance``.
JSONValue: TypeAlias = (
    "bool | int | float | str | list[JSONValue] | dict[str, JSONValue] | None"
)

#: A JSON object the engine builds or reads itself.
JSONObject: TypeAlias = dict[str, JSONValue]

#: The JSON boundary: arbitrary user data (a workflow's input and output, a step's data
#: and result, a resume payload, an approval decision). What a caller passes in is
#: checked at run time (``engine.serialization``); what comes back reads from a JSON
#: column and is handed to user code, which indexes it freely. ``Any`` on purpose: the
#: only place the package leaves a value's type open.
UserJSON: TypeAlias = Any

#: A run id as callers give it: the ``WorkflowRun`` primary key (a UUID) or its text.
RunId: TypeAlias = uuid.UUID | str
