from __future__ import annotations

from django.db import models


class AuditEntry(models.Model):
    """One entry of the audit log. `body` holds the exact RFC 8785 bytes that were hashed.

    Version 1 (a hash chain): `seq`, `prev_hash` and the chain `entry_hash` are set at append.
    Version 2 (a Merkle tree): the decision's transaction inserts the entry pending (`seq` null,
    `entry_hash` its RFC 9162 leaf hash); the integrator sets `seq`, once. On PostgreSQL, triggers
    refuse DELETE, TRUNCATE and every UPDATE but that one (operations/migrations/0017). The typed
    columns are copies for lookups; the verifier trusts only `body`.
    """

    log = models.CharField(max_length=200)
    seq = models.BigIntegerField(null=True, blank=True)
    prev_hash = models.CharField(max_length=64, null=True, blank=True)  # noqa: DJ001 - NULL keeps UNIQUE (log, prev_hash) to v1 rows
    entry_hash = models.CharField(max_length=64)
    body = models.BinaryField()
    at = models.DateTimeField()
    type = models.CharField(max_length=64)
    operation_id = models.CharField(max_length=32, blank=True)

    class Meta:
        verbose_name_plural = "audit entries"
        ordering = ["id"]  # insertion order: pending entries have no seq yet
        constraints = [
            # Partial: a pending entry (no seq yet) and a version-2 entry (no prev) would otherwise
            # each add an index entry that can never conflict - two of the append's index writes.
            models.UniqueConstraint(
                fields=["log", "seq"], name="audit_unique_seq", condition=models.Q(seq__isnull=False)
            ),
            models.UniqueConstraint(
                fields=["log", "prev_hash"], name="audit_unique_prev", condition=models.Q(prev_hash__isnull=False)
            ),
        ]
        indexes = [
            models.Index(fields=["operation_id", "seq"], name="audit_operation_idx"),
            models.Index(fields=["at"], name="audit_at_idx"),
            models.Index(fields=["log", "id"], name="audit_pending_idx", condition=models.Q(seq__isnull=True)),
            # The archive ledger's records (operations.audit.ledger), found without reading the log.
            models.Index(fields=["log", "seq"], name="audit_archived_idx", condition=models.Q(type="audit.archived")),
        ]

    def __str__(self) -> str:
        return f"{self.log}#{self.seq}"


class AuditHead(models.Model):
    """The chain head of one log; appends serialise on a row lock of this row."""

    log = models.CharField(max_length=200, primary_key=True)
    seq = models.BigIntegerField(default=0)
    head_hash = models.CharField(max_length=64)

    def __str__(self) -> str:
        return f"{self.log}@{self.seq}"


class AuditCheckpoint(models.Model):
    """A signed note committing to the log's size and head at a time: the chain head (version 1) or
    the tree root (`tree`; the first such, the switch, also signs the chain head in `chain_head`)."""

    log = models.CharField(max_length=200)
    size = models.BigIntegerField()
    head_hash = models.CharField(max_length=64)
    tree = models.BooleanField(default=False)
    chain_head = models.CharField(max_length=64, blank=True)
    signed_at = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    note = models.TextField()

    class Meta:
        ordering = ["log", "size", "signed_at"]
        indexes = [models.Index(fields=["log", "size"], name="audit_checkpoint_size_idx")]

    def __str__(self) -> str:
        return f"{self.log} size {self.size} at {self.signed_at:%Y-%m-%dT%H:%M:%SZ}"


class AuditTreeNode(models.Model):
    """A complete subtree of the Merkle tree: leaves [index * 2**level, (index + 1) * 2**level).

    Level 0 holds every leaf hash (version-1 entries included), so any proof is a few lookups.
    Written only by the integrator; the same triggers as entries refuse UPDATE and DELETE."""

    log = models.CharField(max_length=200)
    level = models.SmallIntegerField()
    index = models.BigIntegerField()
    hash = models.BinaryField(max_length=32)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["log", "level", "index"], name="audit_unique_node")]

    def __str__(self) -> str:
        return f"{self.log} node {self.level}/{self.index}"


class AuditTree(models.Model):
    """The integrator's row: how many leaves the tree holds. Integrators lock it (FOR UPDATE SKIP
    LOCKED), so one at a time assigns sequence numbers; `root` and the nodes are re-derived by the
    signer before it signs anything."""

    log = models.CharField(max_length=200, primary_key=True)
    size = models.BigIntegerField(default=0)
    root = models.CharField(max_length=64, blank=True)
    integrated_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.log} tree of {self.size}"


class AuditCosignature(models.Model):
    """A witness's cosignature of a checkpoint (C2SP tlog-cosignature), kept as the signature line it
    adds to the note (operations.audit.witness). Protected by the same triggers as checkpoints."""

    checkpoint = models.ForeignKey(AuditCheckpoint, on_delete=models.PROTECT, related_name="cosignatures")
    witness = models.CharField(max_length=200)
    key_id = models.CharField(max_length=16)
    signed_at = models.DateTimeField()
    line = models.TextField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["checkpoint", "witness"], name="audit_unique_cosignature")]

    def __str__(self) -> str:
        return f"{self.witness} on {self.checkpoint_id}"


class AuditArchive(models.Model):
    """A sealed range of the log (entries first_seq..last_seq, their checkpoints and the tree's edge)
    written and verified by `manage.py archive`, then pruned from the database in chunks by the
    guarded function pollerdash_audit_prune (operations/migrations/0019, 0021, 0026). The tree nodes
    stay: proofs for the entries still here keep working.

    A row is only a claim: it counts when the log records it too (an integrated `audit.archived`
    entry with the same fields, operations.audit.ledger). On PostgreSQL only the table's owner may
    insert one, and nobody may change or delete one (migration 0026)."""

    log = models.CharField(max_length=200)
    first_seq = models.BigIntegerField()
    last_seq = models.BigIntegerField()
    name = models.CharField(max_length=500)
    sha256 = models.CharField(max_length=64)
    size_bytes = models.BigIntegerField()
    root = models.CharField(max_length=64)
    archived_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["log", "last_seq"], name="audit_unique_archive")]

    def __str__(self) -> str:
        return f"{self.log} {self.first_seq}-{self.last_seq}"
