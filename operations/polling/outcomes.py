"""The two decisions that end the watch for now: escalate to a person, or complete the operation."""

from __future__ import annotations

from typing import Any

from operations.polling.model import Action, Decision
from operations.vocabulary import Reason, Status


def escalate(reason: Reason, interpreted: str, explanation: str, **extra: Any) -> Decision:
    return Decision(
        action=Action.ESCALATE,
        status=Status.NEEDS_ATTENTION,
        interpreted_state=interpreted,
        reason=reason,
        explanation=explanation,
        **extra,
    )


def complete(status: Status, interpreted: str, explanation: str, **extra: Any) -> Decision:
    return Decision(
        action=Action.COMPLETE,
        status=status,
        interpreted_state=interpreted,
        explanation=explanation,
        **extra,
    )
