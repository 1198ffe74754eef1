"""The API's only parser: JSON, with every way a body can be unreadable answered 400."""

from __future__ import annotations

from collections.abc import Mapping
from typing import IO, Any

from rest_framework.exceptions import ParseError
from rest_framework.parsers import JSONParser


class PikkuJSONParser(JSONParser):
    """DRF's ``JSONParser``, which also answers 400, not 500, for a body nested too deeply
    to decode (``[[[...]]]`` ten thousand levels down).

    The API takes JSON bodies only: any other content type is 415.
    """

    def parse(self, stream: IO[Any], media_type: str | None = None,
              parser_context: Mapping[str, Any] | None = None) -> Any:
        try:
            return super().parse(stream, media_type, parser_context)
        except RecursionError:
            raise ParseError("JSON parse error - the body is nested too deeply") from None
