"""Who owns the next poll: claims, expired leases, releases, the charge before a request, deferrals.

The fence is bumped on every claim and every reschedule, so a stale worker's write is refused; the
lease expires so a dead worker's claim is taken over. The hot statements (the charge) are plain SQL
(operations/fastsql.py says why).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db import connection
from django.db.models import F, Q, QuerySet

from operations import fastsql
from operations.lifecycle.entries import controller_decision
from operations.models import Operation, StatusCheck
from operations.vocabulary import POLLABLE_STATUSES, DelaySource, Status

_POLLABLE = sorted(POLLABLE_STATUSES)


@dataclass(frozen=True)
class Claim:
    operation_id: str
    fence: int  # the fence the task carries (the claim's own)
    due_at: datetime


def unleased(now: datetime) -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)


def due_unclaimed(*, now: datetime) -> QuerySet[Operation]:
    """Pollable operations whose next poll is due and that no live lease holds."""
    return Operation.objects.filter(status__in=_POLLABLE, next_poll_at__lte=now).filter(unleased(now)).order_by()


def due_accounts(*, now: datetime) -> list[str]:
    """The accounts with due unclaimed operations, sorted (a claiming pass's first statement)."""
    lease = fastsql.column(Operation, "lease_expires_at")
    rows = fastsql.fetchall(
        f"SELECT DISTINCT {fastsql.column(Operation, 'account')} FROM {fastsql.table(Operation)} "
        f"WHERE {fastsql.column(Operation, 'status')} IN ({', '.join(['%s'] * len(_POLLABLE))}) "
        f"AND {fastsql.column(Operation, 'next_poll_at')} <= %s AND ({lease} IS NULL OR {lease} <= %s)",
        [*_POLLABLE, *[fastsql.prep(Operation, "next_poll_at", now)] * 2],
    )
    return sorted(account for (account,) in rows)


def claim_due_rows(*, account: str, now: datetime, take: int, owner: str) -> list[Claim]:
    """Claim up to `take` due operations of one account for `owner`: fence + 1 and a lease each.

    Runs inside the dispatcher's transaction, which enqueues the claims' tasks before it commits.
    """
    lease_until = now + timedelta(seconds=settings.POLL_LEASE_S)
    if connection.vendor == "postgresql":
        # One statement (a dispatcher pass runs one per account): the due rows nobody holds,
        # oldest first, locked and claimed, each keeping its own due time. Plain SQL: the ORM's
        # SELECT ... FOR UPDATE then UPDATE cost the dispatcher two compiled queries.
        status, due = fastsql.column(Operation, "status"), fastsql.column(Operation, "next_poll_at")
        fenced, lease = fastsql.column(Operation, "fence"), fastsql.column(Operation, "lease_expires_at")
        claim_due = fastsql.column(Operation, "claim_due_at")
        live = ", ".join(["%s"] * len(_POLLABLE))
        sql = (
            f"UPDATE {fastsql.table(Operation)} SET {fenced} = {fenced} + 1, "
            f"{fastsql.column(Operation, 'lease_owner')} = %s, {lease} = %s, "
            f"{fastsql.column(Operation, 'claimed_at')} = %s, {claim_due} = {due} "
            f"WHERE id IN (SELECT id FROM {fastsql.table(Operation)} WHERE {fastsql.column(Operation, 'account')} = %s "
            f"AND {status} IN ({live}) AND {due} <= %s AND ({lease} IS NULL OR {lease} <= %s) "
            f"ORDER BY {due} LIMIT %s FOR UPDATE SKIP LOCKED) RETURNING id, {fenced}, {claim_due}"
        )
        rows = fastsql.fetchall(sql, [owner, lease_until, now, account, *_POLLABLE, now, now, take])
        return [Claim(*row) for row in sorted(rows, key=lambda row: row[2])]
    query = due_unclaimed(now=now).filter(account=account).order_by("next_poll_at")
    claims: list[Claim] = []
    # SQLite has no row locks: claim each row by compare-and-set on its fence.
    for pk, fence, due_at in query.values_list("pk", "fence", "next_poll_at")[:take]:
        won = (
            Operation.objects.filter(pk=pk, fence=fence)
            .filter(unleased(now))
            .update(
                fence=fence + 1, lease_owner=owner, lease_expires_at=lease_until, claimed_at=now, claim_due_at=due_at
            )
        )
        if won:
            # Typing: claimable rows always have next_poll_at: the query filters on it.
            claims.append(Claim(pk, fence + 1, due_at))  # type: ignore[arg-type]
    return claims


@dataclass(frozen=True)
class ExpiredLease:
    operation_id: str
    owner: str
    fence: int
    expired_at: datetime


def take_expired_lease(*, lease: ExpiredLease) -> bool:
    """Take an expired claim away from its holder (fence + 1); False if anything moved meanwhile.

    The request the holder may have sent stays charged (it was charged before sending); the
    operation is still due, so the next claim hands it to a live worker with the new fence.
    """
    return bool(
        Operation.objects.filter(pk=lease.operation_id, fence=lease.fence, lease_expires_at=lease.expired_at).update(
            fence=lease.fence + 1, lease_owner="", lease_expires_at=None, claimed_at=None
        )
    )


def release(*, operation_id: str, fence: int) -> bool:
    """Give up a claim without polling: the fence moves so a duplicate task is a no-op."""
    return bool(
        Operation.objects.filter(pk=operation_id, fence=fence).update(
            fence=fence + 1, lease_owner="", lease_expires_at=None, claimed_at=None, claim_due_at=None
        )
    )


def charge(
    *, op: Operation, fence: int, worker: str, started_at: datetime, now: datetime, reserved: bool
) -> tuple[Operation, StatusCheck] | None:
    """Compare-and-set the fence, charge one request and record it as sent; None if the CAS lost.

    The request counter is persisted before the request leaves, so a request whose answer is lost
    stays charged. `reserved`: the claim spends the send slot the dispatcher admitted for it, so it
    must still be a live claim.
    """
    sets, params = fastsql.assignments(
        Operation,
        {
            "fence": fence + 1,
            "status": Status.RUNNING.value,
            "approved_checks": 0,
            "lease_owner": worker,
            "lease_expires_at": now + timedelta(seconds=settings.POLL_LEASE_S),
            "claimed_at": None,
            "updated_at": now,
        },
    )
    used, budget = fastsql.column(Operation, "status_requests_used"), fastsql.column(Operation, "max_status_requests")
    where = (
        f"id = %s AND {fastsql.column(Operation, 'fence')} = %s AND {fastsql.column(Operation, 'status')} IN (%s, %s) "
        f"AND {used} < {budget}"
    )
    params += [op.pk, fence, Status.PENDING.value, Status.RUNNING.value]
    if reserved:
        where += (
            f" AND {fastsql.column(Operation, 'claimed_at')} IS NOT NULL"
            f" AND {fastsql.column(Operation, 'lease_expires_at')} > %s"
        )
        params.append(fastsql.prep(Operation, "lease_expires_at", now))
    sequence = fastsql.column(Operation, "sequence")
    # The request count and the status are visible to agents: the sequence moves with them.
    increments = f"{used} = {used} + 1, {sequence} = {sequence} + 1"
    update = f"UPDATE {fastsql.table(Operation)} SET {sets}, {increments} WHERE {where}"
    check = StatusCheck(
        operation=op,
        account=op.account,
        fence=fence + 1,
        due_at=op.claim_due_at or op.next_poll_at,
        started_at=started_at,
        sent_at=now,
    )
    values = {"operation": op.pk, **{name: getattr(check, name) for name in _CHECK_SENT_FIELDS}}
    columns = ", ".join(fastsql.column(StatusCheck, name) for name in values)
    inserted = [fastsql.prep(StatusCheck, name, value) for name, value in values.items()]
    if connection.vendor == "postgresql":
        # One round trip: the check is inserted only if the fenced charge changed the row.
        casts = ", ".join(f"%s::{fastsql.type_of(StatusCheck, name)}" for name in values)
        row = fastsql.fetchone(
            f"WITH charged AS ({update} RETURNING id) INSERT INTO {fastsql.table(StatusCheck)} ({columns}) "
            f"SELECT {casts} FROM charged RETURNING id",
            [*params, *inserted],
        )
        if row is None:
            return None
    else:
        if fastsql.execute(update, params) != 1:
            return None
        row = fastsql.fetchone(
            f"INSERT INTO {fastsql.table(StatusCheck)} ({columns}) "
            f"VALUES ({', '.join(['%s'] * len(values))}) RETURNING id",
            inserted,
        )
    check.pk = row[0] if row else None
    op.fence, op.status = fence + 1, Status.RUNNING
    op.status_requests_used += 1
    op.sequence += 1
    op.approved_checks = 0
    return op, check


@dataclass(frozen=True)
class SentCheck:
    """The status check a group's charge inserted for one request (plain values, no model)."""

    pk: int
    operation_id: str
    account: str
    fence: int  # the charge's fence: the outcome is written only while it still holds
    due_at: datetime | None
    started_at: datetime
    sent_at: datetime

    def as_model(self, *, op: Operation) -> StatusCheck:
        check = StatusCheck(
            operation=op,
            account=self.account,
            fence=self.fence,
            due_at=self.due_at,
            started_at=self.started_at,
            sent_at=self.sent_at,
        )
        check.pk = self.pk
        check._state.adding = False
        return check


def charge_group(
    *, claims: list[tuple[Operation, int]], worker: str, started_at: datetime, now: datetime
) -> dict[str, SentCheck]:
    """Charge several admitted claims at once: one UPDATE, one multi-row INSERT of their checks.

    Each row is still fenced and must still be a live admitted claim with budget left, exactly as
    `charge(reserved=True)`; the rows that lost are left out of the answer. Runs inside the
    caller's transaction, which holds the accounts' shared locks and checked the window's room.
    Each request is charged before it is sent (the caller sends after this commits).
    """
    if not claims:
        return {}
    sets, params = fastsql.assignments(
        Operation,
        {
            "status": Status.RUNNING.value,
            "approved_checks": 0,
            "lease_owner": worker,
            "lease_expires_at": now + timedelta(seconds=settings.POLL_LEASE_S),
            "claimed_at": None,
            "updated_at": now,
        },
    )
    fence, used = fastsql.column(Operation, "fence"), fastsql.column(Operation, "status_requests_used")
    budget, sequence = fastsql.column(Operation, "max_status_requests"), fastsql.column(Operation, "sequence")
    increments = f"{fence} = {fence} + 1, {used} = {used} + 1, {sequence} = {sequence} + 1"
    live = f"{fastsql.column(Operation, 'status')} IN (%s, %s) AND {used} < {budget}"
    claimed, lease = fastsql.column(Operation, "claimed_at"), fastsql.column(Operation, "lease_expires_at")
    reserved = f"{claimed} IS NOT NULL AND {lease} > %s"
    params += [Status.PENDING.value, Status.RUNNING.value, fastsql.prep(Operation, "lease_expires_at", now)]
    pks = sorted(op.pk for op, _ in claims)
    if connection.vendor == "postgresql":
        # One statement with a fixed text: the claims as two arrays, the rows locked in key order
        # by the statement itself (fastsql.locking_subquery).
        sql = (
            f"UPDATE {fastsql.table(Operation)} SET {sets}, {increments} WHERE {live} AND {reserved} "
            f"AND (id, {fence}) IN (SELECT * FROM unnest(%s::{fastsql.array_of(Operation, 'id')}, %s::bigint[])) "
            f"AND id IN ({fastsql.locking_subquery(Operation)}) RETURNING id"
        )
        params += [[op.pk for op, _ in claims], [claim_fence for _, claim_fence in claims], pks]
    else:
        pairs = ", ".join(["(%s, %s)"] * len(claims))
        sql = (
            f"UPDATE {fastsql.table(Operation)} SET {sets}, {increments} "
            f"WHERE {live} AND {reserved} AND (id, {fence}) IN ({pairs}) RETURNING id"
        )
        for op, claim_fence in claims:
            params += [op.pk, claim_fence]
    won = {row[0] for row in fastsql.fetchall(sql, params)}
    charged = [(op, claim_fence) for op, claim_fence in claims if op.pk in won]
    if not charged:
        return {}
    check_ids = _insert_checks(
        rows=[
            [op.pk, op.account, claim_fence + 1, op.claim_due_at or op.next_poll_at, started_at, now]
            for op, claim_fence in charged
        ]
    )
    sent: dict[str, SentCheck] = {}
    for op, claim_fence in charged:
        op.fence, op.status = claim_fence + 1, Status.RUNNING
        op.status_requests_used += 1
        op.sequence += 1
        op.approved_checks = 0
        sent[op.pk] = SentCheck(
            check_ids[op.pk], op.pk, op.account, claim_fence + 1, op.claim_due_at or op.next_poll_at, started_at, now
        )
    return sent


def _blank_check() -> list[object]:
    """A new check's blank answer columns (_CHECK_SENT_FIELDS[5:]), prepared for the backend."""
    blank = StatusCheck()
    return [fastsql.prep(StatusCheck, name, getattr(blank, name)) for name in _CHECK_SENT_FIELDS[5:]]


_SENT_NAMES = ("operation", "account", "fence", "due_at", "started_at", "sent_at")


def _insert_checks(*, rows: list[list[object]]) -> dict[str, int]:
    """Insert a group's status checks (values in _SENT_NAMES order, the rest blank); their ids by operation."""
    defaults = _blank_check()
    columns = ", ".join(fastsql.column(StatusCheck, name) for name in (*_SENT_NAMES, *_CHECK_SENT_FIELDS[5:]))
    returning = f"RETURNING id, {fastsql.column(StatusCheck, 'operation')}"
    prepared = [
        [fastsql.prep(StatusCheck, name, value) for name, value in zip(_SENT_NAMES, row, strict=True)] for row in rows
    ]
    if connection.vendor == "postgresql":
        # One array per column: a fixed statement text for any group size (fastsql.update_rows).
        arrays = ", ".join(f"%s::{fastsql.array_of(StatusCheck, name)}" for name in _SENT_NAMES)
        constants = ", ".join(f"%s::{fastsql.type_of(StatusCheck, name)}" for name in _CHECK_SENT_FIELDS[5:])
        sql = (
            f"INSERT INTO {fastsql.table(StatusCheck)} ({columns}) SELECT v.*, {constants} "
            f"FROM unnest({arrays}) AS v {returning}"
        )
        params = [*defaults, *[[row[index] for row in prepared] for index in range(len(_SENT_NAMES))]]
    else:
        one = f"({', '.join(['%s'] * (len(_SENT_NAMES) + len(defaults)))})"
        sql = f"INSERT INTO {fastsql.table(StatusCheck)} ({columns}) VALUES {', '.join([one] * len(rows))} {returning}"
        params = [value for row in prepared for value in (*row, *defaults)]
    return {operation_id: pk for pk, operation_id in fastsql.fetchall(sql, params)}


_CHECK_SENT_FIELDS = (
    "account",
    "fence",
    "due_at",
    "started_at",
    "sent_at",
    "provider_request_id",
    "retry_after",
    "body_digest",
    "transport_error",
    "provider_state",
    "interpreted_state",
    "decision",
    "reason",
    "delay_source",
    "charged_transport",
    "warnings",
)


def defer(
    *,
    op: Operation,
    fence: int,
    until: datetime,
    why: str,
    now: datetime,
    source: DelaySource = DelaySource.PROVIDER_RETRY_AFTER,
) -> bool:
    """Reschedule without sending or charging (a paused or busy account). Runs inside the caller's
    transaction; False if the fence moved."""
    moved = Operation.objects.filter(pk=op.pk, fence=fence).update(
        fence=fence + 1,
        sequence=F("sequence") + 1,
        next_poll_at=until,
        delay_source=source,
        lease_owner="",
        lease_expires_at=None,
        claimed_at=None,
        updated_at=now,
    )
    if moved:
        controller_decision(
            op,
            state=op.status,
            decision="defer",
            reason=why,
            next_poll_at=until,
            delay_source=source,
            delay_ms=round((until - now).total_seconds() * 1000),
        )
    return bool(moved)
