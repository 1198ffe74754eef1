"""Value references in graph node inputs: ``ref(node, path)`` and ``template(text, refs)``."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

TRIGGER = "trigger"
ITEM = "$item"
_PLACEHOLDER = re.compile(r"\$(\d+)")


@dataclass(frozen=True)
class Ref:
    """A reference to a node's result (``trigger``: the run input; ``$item``: the item)."""

    node: str
    path: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {"$ref": self.node, "path": self.path}


def ref(node: str, path: str | None = None) -> Ref:
    """Refer to node ``node``'s result (or part of it, by dotted ``path``).

    ``ref("trigger", "email")`` is the run input's ``email``; ``ref("$item")`` is the
    current ``for_each`` item.
    """
    if not isinstance(node, str) or not node:
        raise TypeError(f"ref() needs a node id, not {node!r}")
    if path is not None and not isinstance(path, str):
        raise TypeError(f"ref() path must be a dotted string, not {path!r}")
    return Ref(node, path)


def template(text: str, refs: list[Ref]) -> dict[str, Any]:
    """A string built from ``text`` with ``$0``, ``$1``... replaced by the refs' values."""
    parts: list[str] = []
    expressions: list[dict[str, Any]] = []
    last = 0
    for match in _PLACEHOLDER.finditer(text):
        parts.append(text[last:match.start()])
        index = int(match.group(1))
        chosen = refs[index] if index < len(refs) else Ref("unknown")
        expressions.append(chosen.to_json())
        last = match.end()
    parts.append(text[last:])
    return {"$template": {"parts": parts, "expressions": expressions}}


def serialize(value: Any) -> Any:
    """The JSON form of an input value: refs become ``{"$ref", "path"}``."""
    if isinstance(value, Ref):
        return value.to_json()
    if isinstance(value, dict):
        return {k: serialize(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [serialize(v) for v in value]
    return value


def refs_in(value: Any) -> list[dict[str, Any]]:
    """Every ``$ref`` inside a serialized value (templates included)."""
    if isinstance(value, dict):
        if "$ref" in value:
            return [value]
        if "$template" in value:
            return list(value["$template"]["expressions"])
        return [r for v in value.values() for r in refs_in(v)]
    if isinstance(value, list):
        return [r for v in value for r in refs_in(v)]
    return []


def dependencies(value: Any) -> set[str]:
    """The nodes a serialized value waits for (not the run input, the item or unknowns)."""
    return {r["$ref"] for r in refs_in(value)} - {TRIGGER, ITEM, "unknown"}


def dig(value: Any, path: str | None) -> Any:
    """Follow a dotted path (list indexes allowed); any missing step gives None."""
    if not path:
        return value
    for part in path.split("."):
        if isinstance(value, dict):
            value = value.get(part)
        elif isinstance(value, list) and part.lstrip("-").isdigit():
            index = int(part)
            value = value[index] if -len(value) <= index < len(value) else None
        else:
            return None
        if value is None:
            return None
    return value


_UNBOUND = object()


def resolve(value: Any, results: dict[str, Any], trigger: Any, item: Any = _UNBOUND) -> Any:
    """Replace refs and templates in a serialized value by what they point to."""
    if isinstance(value, dict):
        if "$ref" in value:
            return _lookup(value, results, trigger, item)
        if "$template" in value:
            spec = value["$template"]
            out = spec["parts"][0]
            for expression, part in zip(spec["expressions"], spec["parts"][1:], strict=False):
                found = _lookup(expression, results, trigger, item)
                out += ("" if found is None else str(found)) + part
            return out
        return {k: resolve(v, results, trigger, item) for k, v in value.items()}
    if isinstance(value, list):
        return [resolve(v, results, trigger, item) for v in value]
    return value


def _lookup(reference: dict[str, Any], results: dict[str, Any], trigger: Any, item: Any) -> Any:
    node, path = reference["$ref"], reference.get("path")
    if node == TRIGGER:
        return dig(trigger, path)
    if node == ITEM:
        # Unbound items pass through verbatim (a child workflow may bind them).
        return reference if item is _UNBOUND else dig(item, path)
    return dig(results.get(node), path)
