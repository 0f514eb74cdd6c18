"""Who owns the next poll: claims, expired leases, releases, the charge before a request, deferrals.

The fence is bumped on every claim and every reschedule, so a stale worker's write is refused; the
lease expires so a dead worker's claim is taken over. What each writes is a transition of
operations/lifecycle/transitions.py (CLAIM, CHARGE, RELEASE, DEFER): one poll's charge and a
group's are the same change. The hot statements (the claim, the charge) are plain SQL
(operations/infrastructure/fastsql.py says why, and writes the statement shapes PostgreSQL and SQLite differ on).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q, QuerySet

from operations.infrastructure import fastsql
from operations.lifecycle.entries import controller_decision
from operations.lifecycle.transitions import CHARGE, CLAIM, DEFER, RELEASE, Change, orm_fence_guard
from operations.models import Operation, StatusCheck
from operations.vocabulary import POLLABLE_STATUSES, DelaySource

_POLLABLE = sorted(POLLABLE_STATUSES)


@dataclass(frozen=True)
class Claim:
    operation_id: str
    fence: int  # the fence the task carries (the claim's own)
    due_at: datetime


def unleased(*, now: datetime) -> Q:
    return Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lte=now)


def due_unclaimed(*, now: datetime) -> QuerySet[Operation]:
    """Pollable operations whose next poll is due and that no live lease holds."""
    return Operation.objects.filter(status__in=_POLLABLE, next_poll_at__lte=now).filter(unleased(now=now)).order_by()


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
    One statement (a dispatcher pass runs one per account): the due rows nobody holds, oldest
    first, locked (skipping rows another dispatcher holds) and claimed, each keeping its own due
    time. Plain SQL: the ORM's SELECT ... FOR UPDATE then UPDATE cost the dispatcher two compiled
    queries.
    """
    lease_until = now + timedelta(seconds=settings.POLL_LEASE_S)
    sets, params = CLAIM.given(lease_owner=owner, lease_expires_at=lease_until, claimed_at=now).sql_set()
    status, due = fastsql.column(Operation, "status"), fastsql.column(Operation, "next_poll_at")
    lease, claim_due = fastsql.column(Operation, "lease_expires_at"), fastsql.column(Operation, "claim_due_at")
    live = ", ".join(["%s"] * len(_POLLABLE))
    at = fastsql.prep(Operation, "next_poll_at", now)
    rows = fastsql.fetchall(
        f"UPDATE {fastsql.table(Operation)} SET {sets} "
        f"WHERE id IN (SELECT id FROM {fastsql.table(Operation)} WHERE {fastsql.column(Operation, 'account')} = %s "
        f"AND {status} IN ({live}) AND {due} <= %s AND ({lease} IS NULL OR {lease} <= %s) "
        f"ORDER BY {due} LIMIT %s{fastsql.lock_clause(skip_locked=True)}) "
        f"RETURNING id, {fastsql.column(Operation, 'fence')}, {claim_due}",
        [*params, account, *_POLLABLE, at, at, take],
    )
    claims = [Claim(*_claimed(row)) for row in rows]
    return sorted(claims, key=lambda claim: claim.due_at)


def _claimed(row: tuple[object, ...]) -> tuple[str, int, datetime]:
    """A claim's row as the ORM would read it (SQLite returns its datetimes as text)."""
    op = fastsql.instance(Operation, ("id", "fence", "claim_due_at"), row)
    # Typing: a claimed row always has a due time: the statement copies next_poll_at, filtered on.
    return op.pk, op.fence, op.claim_due_at  # type: ignore[return-value]


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
    guard = orm_fence_guard(fence=lease.fence) & Q(lease_expires_at=lease.expired_at)
    return bool(Operation.objects.filter(guard, pk=lease.operation_id).update(**RELEASE.given().orm_update()))


def release(*, operation_id: str, fence: int) -> bool:
    """Give up a claim without polling: the fence moves so a duplicate task is a no-op."""
    return bool(
        Operation.objects.filter(orm_fence_guard(fence=fence), pk=operation_id).update(**RELEASE.given().orm_update())
    )


def _charge_change(*, worker: str, now: datetime) -> Change:
    """The charge of one request, the same for a single poll and for each of a group's."""
    return CHARGE.given(
        lease_owner=worker, lease_expires_at=now + timedelta(seconds=settings.POLL_LEASE_S), updated_at=now
    )


def _chargeable(*, now: datetime, reserved: bool) -> tuple[str, list[object]]:
    """What a charge requires of its row besides its fence: a status it starts from, budget left,
    and (`reserved`: it spends the send slot the dispatcher admitted for it) a live claim."""
    used, budget = fastsql.column(Operation, "status_requests_used"), fastsql.column(Operation, "max_status_requests")
    statuses = sorted(str(status) for status in CHARGE.sources)
    sql = f"{fastsql.column(Operation, 'status')} IN ({', '.join(['%s'] * len(statuses))}) AND {used} < {budget}"
    params: list[object] = [*statuses]
    if reserved:
        sql += (
            f" AND {fastsql.column(Operation, 'claimed_at')} IS NOT NULL"
            f" AND {fastsql.column(Operation, 'lease_expires_at')} > %s"
        )
        params.append(fastsql.prep(Operation, "lease_expires_at", now))
    return sql, params


def charge(
    *, op: Operation, fence: int, worker: str, started_at: datetime, now: datetime, reserved: bool
) -> tuple[Operation, StatusCheck] | None:
    """Compare-and-set the fence, charge one request and record it as sent; None if the CAS lost.

    The request counter is persisted before the request leaves, so a request whose answer is lost
    stays charged. `reserved`: the claim spends the send slot the dispatcher admitted for it, so it
    must still be a live claim. One round trip where the backend allows it: the check is inserted
    only if the fenced charge changed the row.
    """
    change = _charge_change(worker=worker, now=now)
    change.check(was=op.status)
    sets, params = change.sql_set()
    chargeable, chargeable_params = _chargeable(now=now, reserved=reserved)
    fenced = f"id = %s AND {fastsql.column(Operation, 'fence')} = %s"
    update = f"UPDATE {fastsql.table(Operation)} SET {sets} WHERE {fenced} AND {chargeable}"
    check = StatusCheck(
        operation=op,
        account=op.account,
        fence=fence + 1,
        due_at=op.claim_due_at or op.next_poll_at,
        started_at=started_at,
        sent_at=now,
    )
    values = {"operation": op.pk, **{name: getattr(check, name) for name in _CHECK_SENT_FIELDS}}
    check.pk = fastsql.insert_if_written(
        update,
        [*params, op.pk, fence, *chargeable_params],
        model=StatusCheck,
        values={name: fastsql.prep(StatusCheck, name, value) for name, value in values.items()},
    )
    if check.pk is None:
        return None
    change.apply(op=op)
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
    `charge(reserved=True)`: the same change (`_charge_change`), the same conditions. The rows that
    lost are left out of the answer. Runs inside the caller's transaction, which holds the
    accounts' shared locks and checked the window's room. Each request is charged before it is
    sent (the caller sends after this commits). The statement has a fixed text for any group
    size and locks its rows in key order itself (fastsql.rows_in, fastsql.in_key_order).
    """
    if not claims:
        return {}
    change = _charge_change(worker=worker, now=now)
    for op, _ in claims:
        change.check(was=op.status)
    sets, params = change.sql_set()
    chargeable, chargeable_params = _chargeable(now=now, reserved=True)
    fenced, fenced_params = fastsql.rows_in(Operation, ("id", "fence"), [(op.pk, fence) for op, fence in claims])
    locked, locked_params = fastsql.in_key_order(Operation, [op.pk for op, _ in claims])
    sql = f"UPDATE {fastsql.table(Operation)} SET {sets} WHERE {chargeable} AND {fenced}{locked} RETURNING id"
    won = {row[0] for row in fastsql.fetchall(sql, [*params, *chargeable_params, *fenced_params, *locked_params])}
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
        change.apply(op=op)
        sent[op.pk] = SentCheck(
            check_ids[op.pk], op.pk, op.account, claim_fence + 1, op.claim_due_at or op.next_poll_at, started_at, now
        )
    return sent


_SENT_NAMES = ("operation", "account", "fence", "due_at", "started_at", "sent_at")


def _insert_checks(*, rows: list[list[object]]) -> dict[str, int]:
    """Insert a group's status checks (values in _SENT_NAMES order, the rest blank); their ids by operation."""
    blank = StatusCheck()
    rows = [
        [fastsql.prep(StatusCheck, name, value) for name, value in zip(_SENT_NAMES, row, strict=True)] for row in rows
    ]
    inserted = fastsql.insert_rows(
        StatusCheck,
        names=_SENT_NAMES,
        rows=rows,
        constants={name: fastsql.prep(StatusCheck, name, getattr(blank, name)) for name in _CHECK_SENT_FIELDS[5:]},
        returning=("id", "operation"),
    )
    return {operation_id: pk for pk, operation_id in inserted}


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
    change = DEFER.given(next_poll_at=until, delay_source=source, updated_at=now)
    moved = Operation.objects.filter(orm_fence_guard(fence=fence), pk=op.pk).update(**change.orm_update())
    if moved:
        controller_decision(
            op=op,
            state=op.status,
            decision="defer",
            reason=why,
            next_poll_at=until,
            delay_source=source,
            delay_ms=round((until - now).total_seconds() * 1000),
        )
    return bool(moved)
