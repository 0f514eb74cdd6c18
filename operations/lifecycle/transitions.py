"""Each transition of an operation's lifecycle, defined once, and the status changes allowed.

A transition names the statuses it starts from, the status it writes (or that it keeps the
status), the values it always sets, the values each use must give, and the counters it moves by
one. Every writer of an operation's status or claim goes through one: the single poll
(controller.py, `claims.charge`, `polls.record_outcome`), a group of polls (batch.py,
`claims.charge_group`, `poll_groups.record_group`), the dispatcher's claims and sweeps, and the
decisions on a card (`humans`, `cancels`). The same definition is rendered three ways, so no two
paths can write a transition differently:

- `Change.sql_set`: the SET list of a plain statement (operations/infrastructure/fastsql.py), counters as
  `col = col + 1`;
- `Change.orm_update`: keyword arguments for `QuerySet.update()`, counters as `F(col) + 1`;
- `Change.apply`: the change on an instance, after its fenced statement won or before the locked
  row is saved with `save(update_fields=change.fields)`.

    transition     from                      to                 + 1
    CLAIM          pending, running          (kept)             fence
    CHARGE         pending, running          running            fence, status_requests_used, sequence
    RELEASE        any                       (kept)             fence
    DEFER          any                       (kept)             fence, sequence
    RESUME         running, needs_attention  running            fence, sequence
    ESCALATE       pending, running          needs_attention    fence, sequence
    FINISH         running, needs_attention  a terminal status  fence, sequence
    CANCEL_WATCH   not done                  closed             sequence
    LATE_ANSWER    a terminal status         (kept)             fence, sequence

What each sets and what each use gives are in its definition below. "The claim released" is
`CLAIM_RELEASED`, the same four values wherever a claim ends. Every transition but CANCEL_WATCH
moves the fence, so a claim or a request from before it can no longer
write. CANCEL_WATCH keeps it on purpose: a request in flight when an agent cancels still records
its answer, as evidence and a warning (LATE_ANSWER, docs/DESIGN.md section 6), and gives the
claim back then. A use may add the facts of its own act with `also=` (an answer's observations, a
grant's bounds), never a value a transition owns (the status, the claim, the fence, the sequence).

How each write is guarded ("under which fence"): CLAIM, CHARGE, RELEASE and DEFER compare the
fence the caller holds (its claim) in the statement itself, and the poll's outcome (RESUME,
ESCALATE or FINISH after an answer) the fence of its charge while the status is still the one the
charge wrote (`charged_guard`); a statement whose guard no longer holds changes nothing, which is
how a race is lost. ESCALATE before a request, the decisions on a card (RESUME, FINISH),
CANCEL_WATCH and LATE_ANSWER write a row their transaction holds locked. Either way the status
change itself is checked against `ALLOWED` before anything is written: a change the table does
not allow is a bug, refused with `TransitionRefused`, never written.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum
from functools import cache
from types import MappingProxyType
from typing import Any

from django.db.models import F, Q

from operations.infrastructure import fastsql
from operations.models import Operation
from operations.vocabulary import NOT_DONE_STATUSES, POLLABLE_STATUSES, TERMINAL_STATUSES, Status

ANY_STATUS = frozenset(Status)

# The status changes an operation may make (docs/DESIGN.md section 6), and only these: every
# lifecycle write that sets a status checks its change here first. A terminal status never changes.
ALLOWED: Mapping[Status, frozenset[Status]] = MappingProxyType(
    {
        # charged; escalated before its first request; the agent cancelled the watch
        Status.PENDING: frozenset({Status.RUNNING, Status.NEEDS_ATTENTION, Status.CLOSED}),
        # charged again or told to wait; escalated; an answer that ends it; the agent cancelled
        Status.RUNNING: frozenset({Status.RUNNING, Status.NEEDS_ATTENTION, Status.CLOSED} | TERMINAL_STATUSES),
        # a person lets polling continue, closes it or accepts its output; the provider confirmed the
        # card's cancel; the agent cancelled the watch
        Status.NEEDS_ATTENTION: frozenset({Status.RUNNING, Status.CLOSED, Status.SUCCEEDED, Status.CANCELLED}),
        **{status: frozenset() for status in TERMINAL_STATUSES},
    }
)

# What ends a claim, wherever it ends: nobody holds the operation and no claim's due time is kept
# (the next claim sets its own). The fence moves with it (every transition below that uses it).
CLAIM_RELEASED: Mapping[str, object] = MappingProxyType(
    {"lease_owner": "", "lease_expires_at": None, "claimed_at": None, "claim_due_at": None}
)

# The values only a transition writes: a use's own facts (`also=`) never include them.
_OWNED = frozenset({"status", "fence", "sequence", "status_requests_used", "next_poll_at", *CLAIM_RELEASED})


class TransitionRefused(Exception):
    """A lifecycle write the status table does not allow: a bug in the caller, never a race (a race
    loses its fence and writes nothing)."""


@dataclass(frozen=True)
class Column:
    """A value copied from another column of the same row, as the row is when the write happens."""

    name: str


# `eq=False`: a transition is itself (hashed by identity), so its rendered SET list can be kept.
@dataclass(frozen=True, eq=False)
class Transition:
    name: str
    sources: frozenset[Status]  # the statuses it may start from
    targets: frozenset[Status]  # the statuses it may write; empty: it keeps the status
    sets: Mapping[str, object]  # written by every use
    gives: frozenset[str]  # the values each use must give, and only these
    increments: tuple[str, ...] = ("fence", "sequence")

    def given(self, *, also: Mapping[str, object] | None = None, **values: object) -> Change:
        """This transition with a use's values (and the facts of its own act, `also`)."""
        if values.keys() != self.gives:
            raise TypeError(f"{self.name} takes {sorted(self.gives)}, not {sorted(values)}")
        if also:
            if (_OWNED | self.sets.keys()) & also.keys():
                raise TypeError(f"{self.name} writes {sorted((_OWNED | self.sets.keys()) & also.keys())} itself")
            values.update(also)
        written = values.get("status", self.sets.get("status"))
        return Change(transition=self, own=values, status=None if written is None else Status(str(written)))


@dataclass(frozen=True)
class Change:
    """A transition with the values of one use: what one row's write sets and increments."""

    transition: Transition
    own: Mapping[str, object]  # the use's values and its act's facts (the transition's are `sets`)
    status: Status | None  # the status it writes; None when it keeps the row's

    @property
    def values(self) -> dict[str, object]:
        """Every value it sets, the transition's first."""
        return {**self.transition.sets, **self.own}

    @property
    def fields(self) -> list[str]:
        """Every column the change writes (for `save(update_fields=...)`)."""
        return [*self.transition.sets, *self.own, *self.transition.increments]

    @property
    def increments(self) -> tuple[str, ...]:
        return self.transition.increments

    def check(self, *, was: str) -> None:
        """Refuse, loudly, a change from a status the transition or the table does not allow."""
        transition, written = self.transition, self.status
        if was not in transition.sources:
            raise TransitionRefused(f"{transition.name} from {was}: it starts from {_names(transition.sources)}")
        if written is not None and (written not in transition.targets or written not in ALLOWED[Status(was)]):
            raise TransitionRefused(f"{transition.name} from {was} to {written} is not an allowed change")

    def apply(self, *, op: Operation) -> None:
        """The change on the instance (checked first): values set, counters moved by one."""
        self.check(was=op.status)
        for name, value in self.transition.sets.items():
            setattr(op, name, getattr(op, value.name) if isinstance(value, Column) else value)
        for name, value in self.own.items():
            setattr(op, name, value)
        for name in self.transition.increments:
            setattr(op, name, getattr(op, name) + 1)

    def orm_update(self) -> dict[str, Any]:
        """Keyword arguments for `QuerySet.update()`."""
        values: dict[str, Any] = {
            name: F(value.name) if isinstance(value, Column) else value for name, value in self.values.items()
        }
        values.update({name: F(name) + 1 for name in self.transition.increments})
        return values

    def sql_set(self) -> tuple[str, list[object]]:
        """`col = %s, ..., counter = counter + 1` and its parameters, for a plain UPDATE."""
        fixed, fixed_params = _fixed_set(self.transition)
        parts, params = [fixed], [*fixed_params]
        for name, value in self.own.items():
            parts.append(f"{_column(name)} = %s")
            params.append(_prepared(name, value))
        return ", ".join(parts), params

    def sql_values(self) -> list[object]:
        """Every value it sets, in `shape` order, as the backend stores them (a group's statement
        carries them per row; the counters are in its text)."""
        if any(isinstance(value, Column) for value in self.transition.sets.values()):
            raise TypeError(f"{self.transition.name} copies a column: write it with sql_set")
        return [_prepared(name, value) for name, value in self.values.items()]

    def shape(self) -> tuple[tuple[str, ...], tuple[str, ...]]:
        """The columns it writes, as a group's statement is keyed: (set, incremented)."""
        return (*self.transition.sets, *self.own), self.transition.increments


_columns: dict[str, str] = {}


def _column(name: str) -> str:
    # A plain dict in front of fastsql.column: a poll renders a few dozen names.
    found = _columns.get(name)
    if found is None:
        found = _columns[name] = fastsql.column(Operation, name)
    return found


def _prepared(name: str, value: object) -> object:
    # A plain string for an enum member, as the column stores it (fastsql.prep then passes it
    # through as it is, instead of through Django's conversions).
    return fastsql.prep(Operation, name, str(value) if isinstance(value, StrEnum) else value)


@cache
def _fixed_set(transition: Transition) -> tuple[str, tuple[object, ...]]:
    """The part of a transition's SET list every use shares (its `sets` and its counters), rendered
    once per process: the values are constants, prepared for this process's backend."""
    parts: list[str] = []
    params: list[object] = []
    for name, value in transition.sets.items():
        if isinstance(value, Column):
            parts.append(f"{_column(name)} = {_column(value.name)}")
        else:
            parts.append(f"{_column(name)} = %s")
            params.append(_prepared(name, value))
    parts += [f"{_column(name)} = {_column(name)} + 1" for name in transition.increments]
    return ", ".join(parts), tuple(params)


def _names(statuses: Iterable[Status]) -> str:
    return ", ".join(sorted(str(status) for status in statuses))


def status_in(*, statuses: Iterable[Status], alias: str = "") -> tuple[str, list[object]]:
    """`status IN (...)` for a plain statement (`alias`: the table's, with its dot)."""
    wanted = sorted(str(status) for status in statuses)
    return f"{alias}{fastsql.column(Operation, 'status')} IN ({', '.join(['%s'] * len(wanted))})", [*wanted]


def fence_guard(*, fence: int, statuses: Iterable[Status] = ANY_STATUS) -> tuple[str, list[object]]:
    """`fence = %s` (the fence the caller holds) and, unless any will do, `status IN (...)`."""
    sql = f"{fastsql.column(Operation, 'fence')} = %s"
    params: list[object] = [fence]
    wanted = frozenset(statuses)
    if wanted != ANY_STATUS:
        status_sql, status_params = status_in(statuses=wanted)
        sql += f" AND {status_sql}"
        params += status_params
    return sql, params


def orm_fence_guard(*, fence: int, statuses: Iterable[Status] = ANY_STATUS) -> Q:
    """`fence_guard` for the ORM."""
    wanted = frozenset(statuses)
    guard = Q(fence=fence)
    return guard if wanted == ANY_STATUS else guard & Q(status__in=sorted(str(status) for status in wanted))


CLAIM = Transition(
    name="claim",
    sources=POLLABLE_STATUSES,
    targets=frozenset(),
    # The due time the claim serves: dispatch lag is measured from it (the check records it).
    sets=MappingProxyType({"claim_due_at": Column("next_poll_at")}),
    gives=frozenset({"lease_owner", "lease_expires_at", "claimed_at"}),
    increments=("fence",),
)
CHARGE = Transition(
    name="charge",
    sources=POLLABLE_STATUSES,
    targets=frozenset({Status.RUNNING}),
    # The claim's send slot is spent (claimed_at none), its lease now the worker's; an approval is
    # for the one check it was given for.
    sets=MappingProxyType({"status": Status.RUNNING, "approved_checks": 0, "claimed_at": None}),
    gives=frozenset({"lease_owner", "lease_expires_at", "updated_at"}),
    # The request is counted before it leaves; the count and the status are visible to agents.
    increments=("fence", "status_requests_used", "sequence"),
)
RELEASE = Transition(
    name="release",
    # Fenced by the claim alone: its holder gives it back whatever became of the operation.
    sources=ANY_STATUS,
    targets=frozenset(),
    sets=CLAIM_RELEASED,
    gives=frozenset(),
    increments=("fence",),
)
DEFER = Transition(
    name="defer",
    sources=ANY_STATUS,  # like RELEASE: fenced by the claim alone
    targets=frozenset(),
    sets=CLAIM_RELEASED,
    gives=frozenset({"next_poll_at", "delay_source", "updated_at"}),
)
RESUME = Transition(
    name="resume",
    # running: a poll's answer says wait; needs_attention: a person lets polling continue
    sources=frozenset({Status.RUNNING, Status.NEEDS_ATTENTION}),
    targets=frozenset({Status.RUNNING}),
    sets=MappingProxyType({"status": Status.RUNNING, **CLAIM_RELEASED}),
    gives=frozenset({"next_poll_at", "delay_source", "updated_at"}),
)
ESCALATE = Transition(
    name="escalate",
    # before a request (pending, running) or on its answer (running)
    sources=POLLABLE_STATUSES,
    targets=frozenset({Status.NEEDS_ATTENTION}),
    sets=MappingProxyType({"status": Status.NEEDS_ATTENTION, "next_poll_at": None, **CLAIM_RELEASED}),
    gives=frozenset({"updated_at"}),
)
FINISH = Transition(
    name="finish",
    # running: a poll's answer ends it; needs_attention: a person's decision, or the provider
    # confirming the card's cancel
    sources=frozenset({Status.RUNNING, Status.NEEDS_ATTENTION}),
    targets=TERMINAL_STATUSES,
    sets=MappingProxyType({"next_poll_at": None, **CLAIM_RELEASED}),
    gives=frozenset({"status", "result", "error", "completed_at", "updated_at"}),
)
CANCEL_WATCH = Transition(
    name="cancel_watch",
    sources=NOT_DONE_STATUSES,
    targets=frozenset({Status.CLOSED}),
    # The claim and the fence are kept: a request in flight records its answer (LATE_ANSWER).
    sets=MappingProxyType({"status": Status.CLOSED, "next_poll_at": None, "result": None}),
    gives=frozenset({"completed_at", "error", "cancel_requested_at", "cancel_reason", "cancel_state", "updated_at"}),
    increments=("sequence",),
)
LATE_ANSWER = Transition(
    name="late_answer",
    sources=TERMINAL_STATUSES,
    targets=frozenset(),
    sets=CLAIM_RELEASED,
    gives=frozenset({"warnings", "last_http_status", "last_polled_at"}),
)

TRANSITIONS = (CLAIM, CHARGE, RELEASE, DEFER, RESUME, ESCALATE, FINISH, CANCEL_WATCH, LATE_ANSWER)


# A poll's outcome is written only while its charge still holds: the charge's fence, and the
# status the charge wrote.
CHARGED = CHARGE.targets


def charged_guard(*, fence: int) -> tuple[str, list[object]]:
    """The guard of a poll's outcome: the charge's fence, and a status in CHARGED."""
    return fence_guard(fence=fence, statuses=CHARGED)
