"""A group's poll outcomes written together: the common ones (wait, complete) in one transaction and
one multi-row fenced UPDATE, the rare ones (a card, an account pause, a late answer) one by one
through operations/lifecycle/polls.py's `record_outcome`, with the same transitions and the same
audit entries as a poll written alone.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from django.db import DatabaseError, transaction

from operations.audit import entries as audit
from operations.callbacks.outbox import EVENT_COMPLETED, record_event
from operations.infrastructure import fastsql
from operations.lifecycle.claims import SentCheck
from operations.lifecycle.entries import decision_entry
from operations.lifecycle.polls import (
    CHECK_RESPONSE_FIELDS,
    Answer,
    check_answer,
    decision_change,
    decision_facts,
    record_outcome,
)
from operations.lifecycle.transitions import CHARGED, Change, status_in
from operations.models import Operation, StatusCheck
from operations.polling.model import Action, Decision

# The logger of a poll's outcome, alone or in a group: operators find a refused write under one name.
logger = logging.getLogger("operations.lifecycle.polls")


@dataclass(frozen=True)
class Outcome:
    """One answered request of a group: what `record_outcome` takes, with the check as plain values."""

    op: Operation
    check: SentCheck
    decision: Decision
    answer: Answer


def record_group(*, outcomes: list[Outcome]) -> dict[str, bool]:
    """Write a group's outcomes; per operation, whether it was written (False: a newer claim owns it,
    or the database refused that outcome).

    The common outcomes (wait, complete) go in one transaction: one multi-row fenced UPDATE per
    set of changed columns (usually one), the checks' answers, the completion events, and their
    audit entries in one append, last. An operation whose fence moved mid-flight is left out of
    that UPDATE, so it writes nothing there; it and the rare outcomes (a card, an account pause,
    an answer after the operation ended) then take `record_outcome`'s path, one by one.

    Every request is already charged: should the database refuse the group's transaction (one
    value it cannot store), each outcome is written again in its own transaction, so one bad row
    never loses the others; one refused alone writes nothing and stays leased, like a lost answer.
    """
    common = [
        o for o in outcomes if o.decision.account_pause_until is None and o.decision.action is not Action.ESCALATE
    ]
    changes = {o.op.pk: decision_change(op=o.op, decision=o.decision, answer=o.answer) for o in common}
    # The operations as the decisions saw them: the transaction sets the new values on them.
    before = {o.op.pk: {name: getattr(o.op, name) for name in changes[o.op.pk].fields} for o in common}
    try:
        written = _record_common(common, changes)
    except (DatabaseError, audit.AuditError):
        logger.exception("a group's outcomes could not be written together; writing each alone")
        for outcome in common:
            for name, value in before[outcome.op.pk].items():
                setattr(outcome.op, name, value)
        written = {}
    for outcome in outcomes:
        if outcome.op.pk not in written:
            written[outcome.op.pk] = _record_alone(outcome)
    return written


def _record_common(common: list[Outcome], changes: dict[str, Change]) -> dict[str, bool]:
    """`record_group`'s one transaction: the common outcomes it wrote."""
    written: dict[str, bool] = {}
    with transaction.atomic():
        shapes: dict[tuple[tuple[str, ...], tuple[str, ...]], list[tuple[Outcome, Change]]] = {}
        for outcome in common:
            change = changes[outcome.op.pk]
            shapes.setdefault(change.shape(), []).append((outcome, change))
        # Locked in primary-key order (fastsql.lock_rows says why): by the one UPDATE itself when
        # the outcomes share their changed columns (the usual case), else first, in one statement.
        alone = len(shapes) == 1
        if not alone:
            fastsql.lock_rows(Operation, sorted(changes))
        won: set[str] = set()
        for rows in shapes.values():
            won |= _update_many(rows, lock=alone)
        entries, checks = [], []
        for outcome in common:
            if outcome.op.pk not in won:
                continue
            op, decision, answer = outcome.op, outcome.decision, outcome.answer
            changes[op.pk].apply(op=op)
            # Plain values, no StatusCheck instance: the group's checks are written by one UPDATE.
            answered = check_answer(decision=decision, answer=answer)
            checks.append(
                [outcome.check.pk, *[fastsql.prep(StatusCheck, n, answered[n]) for n in CHECK_RESPONSE_FIELDS]]
            )
            if decision.action is Action.COMPLETE:
                record_event(operation=op, event_type=EVENT_COMPLETED)
            entries.append(
                decision_entry(
                    op=op, **decision_facts(op=op, reason=str(answered["reason"]), decision=decision, answer=answer)
                )
            )
            written[op.pk] = True
        if checks:
            fastsql.update_rows(StatusCheck, keys=("id",), names=CHECK_RESPONSE_FIELDS, rows=checks)
        audit.append_many(entries=entries)
    return written


def _record_alone(outcome: Outcome) -> bool:
    check = outcome.check.as_model(op=outcome.op)
    try:
        return record_outcome(op=outcome.op, check=check, decision=outcome.decision, answer=outcome.answer)
    except (DatabaseError, audit.AuditError):
        logger.exception("the outcome for %s (fence %s) could not be written", outcome.op.pk, outcome.check.fence)
        return False


def _update_many(rows: list[tuple[Outcome, Change]], *, lock: bool) -> set[str]:
    """One UPDATE of many operations with the same changed columns; the ids it changed. Each row is
    guarded as a single outcome is (`charged_guard`): its charge's fence, and a status in CHARGED."""
    names, increments = rows[0][1].shape()
    charged, charged_params = status_in(statuses=CHARGED, alias="o.")
    return {
        str(pk)
        for pk in fastsql.update_rows(
            Operation,
            keys=("id", "fence"),
            names=names,
            rows=[[outcome.op.pk, outcome.check.fence, *change.sql_values()] for outcome, change in rows],
            increments=increments,
            where=f" AND {charged}",
            params=charged_params,
            lock=lock,
        )
    }
