"""The OpenAPI schema's named enums: each choice set of the API is one component
(``PikkuRunStatus``, ``PikkuStepStatus``...), so a project's schema generates without
warnings and without ``ENUM_NAME_OVERRIDES``."""

from __future__ import annotations

from typing import Any

from drf_spectacular.extensions import OpenApiSerializerFieldExtension
from drf_spectacular.plumbing import ResolvedComponent


class NamedEnumExtension(OpenApiSerializerFieldExtension):  # type: ignore[no-untyped-call]
    """A ``NamedChoiceField`` as a reference to its own enum component (never an inline
    enum, which drf-spectacular names after the field and warns when names collide)."""

    target_class = "pikku_workflows.engine.summary.NamedChoiceField"

    def map_serializer_field(self, auto_schema: Any, direction: Any) -> Any:
        field = self.target
        component = ResolvedComponent(  # type: ignore[no-untyped-call]
            name=field.enum_name, type=ResolvedComponent.SCHEMA, object=field.enum_name,
            schema={"type": "string", "enum": [str(choice) for choice in field.choices]})
        auto_schema.registry.register_on_missing(component)
        return component.ref
