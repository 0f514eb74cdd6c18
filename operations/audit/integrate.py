"""The integrator: gives pending audit entries their `seq` and adds them to the Merkle tree.

Run by every dispatcher pass (operations.polls.dispatch.run_pass) and by `manage.py audit_integrate`.
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
from django.db import transaction
from django.utils import timezone

from operations.audit import database, tree
from operations.audit.verify import merkle
from operations.models import AuditEntry, AuditHead, AuditTree

BATCH = 5000


class IntegrationError(Exception):
    """A pending entry's stored bytes no longer hash to its leaf hash: nothing is integrated
    until that is explained (the signer would refuse to sign it anyway)."""


def chain_size(log: str) -> int:
    """How many version-1 (chain) entries the log has: they are the tree's first leaves."""
    return AuditHead.objects.filter(log=log).values_list("seq", flat=True).first() or 0


def integrate_once(*, log: str | None = None, limit: int = BATCH, now: datetime | None = None) -> int | None:
    """Integrate up to `limit` entries; how many, or None when another integrator holds the row."""
    log = log or settings.AUDIT_LOG_NAME
    with transaction.atomic():
        size = database.lock_tree(log)
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
        database.number(numbered)
        database.add_nodes(log=log, made=made)
        AuditTree.objects.filter(log=log).update(
            size=edge.size, root=edge.root().hex(), integrated_at=now or timezone.now()
        )
    return len(rows)


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
