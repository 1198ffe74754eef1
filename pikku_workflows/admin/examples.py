"""An example input for the Workflows page's start form, from the input serializer."""

from __future__ import annotations

import datetime
import json
from typing import Any

from ..types import UserJSON

#: Field class name -> the example of a field that declares no ``initial`` value.
_BY_TYPE: dict[str, UserJSON] = {
    "BooleanField": False, "NullBooleanField": False, "IntegerField": 1, "FloatField": 1.0,
    "DecimalField": "1.00", "EmailField": "user@example.com", "URLField": "https://example.com",
    "UUIDField": "00000000-0000-0000-0000-000000000000", "IPAddressField": "127.0.0.1",
    "DurationField": "00:01:00", "JSONField": {}, "DictField": {}, "HStoreField": {},
    "CharField": "example",
}


def example_input(definition: Any) -> str:
    """The JSON the start form offers for ``definition``: from its ``input_serializer``'s
    fields when it declares one (a field's ``initial`` when set, else a value of its
    type; read-only fields, and optional ones without an initial value, left out), else
    ``{}``.

    Args:
        definition: A registered workflow definition.

    Returns:
        Indented JSON text.
    """
    serializer_class = getattr(definition, "input_serializer", None)
    if serializer_class is None:
        return "{}"
    try:
        example = _serializer_example(serializer_class())
    except Exception:  # the serializer is the project's code: never break the page
        return "{}"
    return json.dumps(example, indent=2)


def _serializer_example(serializer: Any) -> dict[str, UserJSON]:
    # Optional fields only when they offer an initial value: an example is short.
    return {name: _field_example(field) for name, field in serializer.fields.items()
            if not field.read_only and (field.required or _initial(field) is not None)}


def _drf_classes(field: Any) -> set[str]:
    """The names of DRF's classes ``field`` is an instance of. Read from its MRO, so that
    the console imports no DRF: a project with input serializers has DRF, one without
    never comes here."""
    return {cls.__name__ for cls in type(field).__mro__
            if cls.__module__.startswith("rest_framework.")}


def _initial(field: Any) -> UserJSON:
    """The field's own ``initial`` value, or None (DRF's defaults: None, "", [], {})."""
    initial = getattr(field, "initial", None)
    initial = initial() if callable(initial) and not isinstance(initial, type) else initial
    if isinstance(initial, type) or initial in (None, "", [], {}):
        return None  # a class: DRF's ``empty`` marker
    return json.loads(json.dumps(initial, default=str))


def _field_example(field: Any) -> UserJSON:
    initial = _initial(field)
    if initial is not None:
        return initial
    classes = _drf_classes(field)
    if "ListSerializer" in classes:
        return [_field_example(field.child)]
    if "BaseSerializer" in classes:
        return _serializer_example(field)
    if "ListField" in classes:
        return [_field_example(field.child)]
    if "ChoiceField" in classes and field.choices:
        return json.loads(json.dumps(next(iter(field.choices)), default=str))
    if getattr(field, "min_value", None) is not None:
        return json.loads(json.dumps(field.min_value, default=str))
    if "DateTimeField" in classes:
        return datetime.datetime(2026, 1, 1, 12, 0, tzinfo=datetime.UTC).isoformat()
    if "DateField" in classes:
        return "2026-01-01"
    for cls in type(field).__mro__:
        if cls.__name__ in _BY_TYPE:
            return _BY_TYPE[cls.__name__]
    return ""
