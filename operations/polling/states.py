"""The provider's state table: where the state is in a body and which set it belongs to."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Missing:
    """Marker for a dotted path that does not exist in the body (distinct from JSON null)."""

    def __repr__(self) -> str:
        return "<missing>"


MISSING = Missing()


class StateClass(StrEnum):
    PENDING = "pending"
    SUCCESS = "success"
    FAILURE = "failure"
    CANCELLED = "cancelled"
    EXPIRED = "expired"
    UNKNOWN = "unknown"


@dataclass(frozen=True)
class StateTable:
    pending: frozenset[str]
    success: frozenset[str]
    failure: frozenset[str]
    cancelled: frozenset[str]
    expired: frozenset[str]

    def classify(self, value: object, *, extra_pending: frozenset[str] = frozenset()) -> StateClass:
        """Exact, case-sensitive match of a string state; anything else is UNKNOWN.

        No normalisation: "Succeeded" or "succeeded " is not "succeeded". A provider that changes
        its vocabulary must be looked at by a person, not silently mapped.
        """
        if not isinstance(value, str):
            return StateClass.UNKNOWN
        for members, state_class in (
            (self.success, StateClass.SUCCESS),
            (self.failure, StateClass.FAILURE),
            (self.cancelled, StateClass.CANCELLED),
            (self.expired, StateClass.EXPIRED),
            (self.pending, StateClass.PENDING),
        ):
            if value in members:
                return state_class
        if value in extra_pending:
            return StateClass.PENDING
        return StateClass.UNKNOWN


def extract(body: object, path: str) -> object:
    """Follow a dotted path ("result.output_url", "items.0.id") into parsed JSON."""
    node = body
    for part in path.split("."):
        if isinstance(node, dict):
            if part not in node:
                return MISSING
            node = node[part]
        elif isinstance(node, list) and part.isascii() and part.isdigit():
            index = int(part)
            if index >= len(node):
                return MISSING
            node = node[index]
        else:
            return MISSING
    return node


def describe_state(value: object) -> str:
    """How a raw state value is shown to people: strings as given, others by kind."""
    if value is MISSING:
        return "<missing>"
    if value is None:
        return "<null>"
    if isinstance(value, str):
        return value
    return f"<{type(value).__name__}: {str(value)[:60]}>"
