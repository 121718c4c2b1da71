"""The base of every API model, and the Kubernetes quantity type they share.

Kept apart from ``common`` so that ``pod_template`` (which ``common.Workload`` embeds) and
``common`` both build on it without importing each other.
"""

from __future__ import annotations

from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel

# Kubernetes quantities, e.g. "8", "500m", "64Gi".
QUANTITY_PATTERN = r"^[+-]?(\d+(\.\d*)?|\.\d+)([eE][+-]?\d+)?(m|k|Ki|Mi|Gi|Ti|Pi|Ei|M|G|T|P|E)?$"


class ApiModel(BaseModel):
    """Base for spec and status models: camelCase aliases, unknown fields rejected."""

    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        use_enum_values=True,
        validate_default=True,
    )

    def to_wire(self) -> dict[str, Any]:
        """The object as it appears in the API: camelCase keys, no unset optionals."""
        return self.model_dump(by_alias=True, exclude_none=True, mode="json")


Quantity = Annotated[str, Field(pattern=QUANTITY_PATTERN)]
