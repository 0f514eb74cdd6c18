"""The integrator: gives pending audit entries their `seq` and adds them to the Merkle tree.

Run by every dispatcher pass (operations.dispatch.run_pass) and by `manage.py audit_integrate`.
Any number may run on any number of hosts: each batch happens in one transaction holding the
log's AuditTree row (PostgreSQL: SELECT ... FOR UPDATE SKIP LOCKED, so a second integrator
skips instead of queueing; SQLite: IMMEDIATE transactions are serial already). Inside it, the
pending entries are taken in insertion order, numbered from the tree's size, their leaf hashes
pushed onto the stored right edge of the tree, and the new complete nodes inserted. A killed
integrator rolls back whole: nothing is numbered twice (UNIQUE (log, seq), and the trigger lets
`seq` be set only from NULL) and nothing is skipped (the next batch starts from the same size).

Version-1 entries (already numbered by the chain) are added first, in `seq` order, so the tree
covers the whole log and old entries get inclusion proofs too.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from operations.audit import tree
from operations.audit.verify import merkle
from operations.models import AuditEntry, AuditHead, AuditTree, AuditTreeNode

BATCH = 5000


class IntegrationError(Exception):
    """A pending entry's stored bytes no longer hash to its leaf hash: nothing is integrated
    until that is explained (the signer would refuse to sign it anyway)."""


def _lock(log: str) -> int | None:
    """Lock the log's tree row for this transaction; its size, or None when another integrator has it."""
    with connection.cursor() as cursor:
        if connection.vendor == "postgresql":
            cursor.execute(
                "INSERT INTO operations_audittree (log, size, root) VALUES (%s, 0, '') ON CONFLICT (log) DO NOTHING",
                [log],
            )
            cursor.execute("SELECT size FROM operations_audittree WHERE log = %s FOR UPDATE SKIP LOCKED", [log])
        else:
            cursor.execute("INSERT OR IGNORE INTO operations_audittree (log, size, root) VALUES (%s, 0, '')", [log])
            cursor.execute("SELECT size FROM operations_audittree WHERE log = %s", [log])
        row = cursor.fetchone()
    return None if row is None else int(row[0])


def chain_size(log: str) -> int:
    """How many version-1 (chain) entries the log has: they are the tree's first leaves."""
    return AuditHead.objects.filter(log=log).values_list("seq", flat=True).first() or 0


def integrate_once(*, log: str | None = None, limit: int = BATCH, now: datetime | None = None) -> int | None:
    """Integrate up to `limit` entries; how many, or None when another integrator holds the row."""
    log = log or settings.AUDIT_LOG_NAME
    with transaction.atomic():
        size = _lock(log)
        if size is None:
            return None
        chained = chain_size(log)
        if size < chained:
            rows = list(
                AuditEntry.objects.filter(log=log, seq__gt=size, seq__lte=min(chained, size + limit))
                .order_by("seq")
                .values_list("pk", "seq", "body", "entry_hash")
            )
            if [seq for _, seq, _, _ in rows] != list(range(size + 1, size + 1 + len(rows))):
                raise IntegrationError(f"version-1 entries after {size} are not contiguous")
        else:
            rows = list(
                AuditEntry.objects.filter(log=log, seq__isnull=True)
                .order_by("pk")
                .values_list("pk", "seq", "body", "entry_hash")[:limit]
            )
        if not rows:
            return 0
        edge = tree.frontier(log=log, size=size)
        made: list[tuple[int, int, bytes]] = []
        numbered: list[tuple[int, int]] = []
        for pk, seq, body, stored_hash in rows:
            leaf = merkle.leaf_hash(bytes(body))
            if seq is None:
                if leaf.hex() != stored_hash:
                    raise IntegrationError(f"pending audit entry {pk} does not hash to its leaf hash")
                numbered.append((pk, edge.size + 1))
            made += edge.push(leaf)
        _number(numbered)
        _add_nodes(log=log, made=made)
        AuditTree.objects.filter(log=log).update(
            size=edge.size, root=edge.root().hex(), integrated_at=now or timezone.now()
        )
    return len(rows)


# Every dispatcher pass integrates what the polls since the last one appended, so these two run
# for every poll: on PostgreSQL each is one statement over arrays (no per-row parameters or CASE
# arms to compile), a fraction of the ORM's bulk_update and bulk_create for the dispatcher and
# the server.


def _number(numbered: list[tuple[int, int]]) -> None:
    """Give the pending entries (pk, seq) their numbers."""
    if not numbered:
        return
    if connection.vendor != "postgresql":
        AuditEntry.objects.bulk_update([AuditEntry(pk=pk, seq=seq) for pk, seq in numbered], ["seq"], batch_size=1000)
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE operations_auditentry AS e SET seq = v.seq "
            "FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, seq) WHERE e.id = v.id",
            [[pk for pk, _ in numbered], [seq for _, seq in numbered]],
        )


def _add_nodes(*, log: str, made: list[tuple[int, int, bytes]]) -> None:
    """Store the tree's new complete subtrees (level, index, hash)."""
    if connection.vendor != "postgresql":
        AuditTreeNode.objects.bulk_create(
            [AuditTreeNode(log=log, level=level, index=index, hash=digest) for level, index, digest in made],
            batch_size=2000,
        )
        return
    if made:
        with connection.cursor() as cursor:
            cursor.execute(
                'INSERT INTO operations_audittreenode (log, level, "index", hash) '
                "SELECT %s, * FROM unnest(%s::smallint[], %s::bigint[], %s::bytea[])",
                [log, [level for level, _, _ in made], [index for _, index, _ in made], [h for _, _, h in made]],
            )


def integrate_all(*, log: str | None = None, limit: int = BATCH) -> int:
    """Integrate until nothing is pending (or another integrator is at work); how many."""
    total = 0
    while True:
        done = integrate_once(log=log, limit=limit)
        if not done:
            return total
        total += done


@dataclass(frozen=True)
class Lag:
    pending: int
    oldest_pending_at: datetime | None

    def seconds(self, now: datetime) -> float:
        if self.oldest_pending_at is None:
            return 0.0
        return max(0.0, (now - self.oldest_pending_at).total_seconds())


def lag(*, log: str | None = None) -> Lag:
    """Entries awaiting integration, and the time of the oldest (shown on /system/ and /metrics)."""
    pending = AuditEntry.objects.filter(log=log or settings.AUDIT_LOG_NAME, seq__isnull=True)
    oldest = pending.order_by("pk").values_list("at", flat=True).first()
    return Lag(pending=pending.count(), oldest_pending_at=oldest)
