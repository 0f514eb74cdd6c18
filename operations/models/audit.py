from __future__ import annotations

from django.db import models


class AuditEntry(models.Model):
    """One link of the hash chain. `body` holds the exact RFC 8785 bytes that were hashed.

    Written only by operations.audit.entries.append; on PostgreSQL, triggers refuse UPDATE, DELETE and
    TRUNCATE. The typed columns are copies for lookups; the verifier trusts only `body`.
    """

    log = models.CharField(max_length=200)
    seq = models.BigIntegerField()
    prev_hash = models.CharField(max_length=64)
    entry_hash = models.CharField(max_length=64)
    body = models.BinaryField()
    at = models.DateTimeField()
    type = models.CharField(max_length=64)
    operation_id = models.CharField(max_length=32, blank=True)

    class Meta:
        ordering = ["seq"]
        constraints = [
            models.UniqueConstraint(fields=["log", "seq"], name="audit_unique_seq"),
            models.UniqueConstraint(fields=["log", "prev_hash"], name="audit_unique_prev"),
        ]
        indexes = [
            models.Index(fields=["operation_id", "seq"], name="audit_operation_idx"),
            models.Index(fields=["at"], name="audit_at_idx"),
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
    """A signed note committing to the chain's size and head hash at a time."""

    log = models.CharField(max_length=200)
    size = models.BigIntegerField()
    head_hash = models.CharField(max_length=64)
    signed_at = models.DateTimeField()
    key_id = models.CharField(max_length=16)
    note = models.TextField()

    class Meta:
        ordering = ["log", "size", "signed_at"]
        indexes = [models.Index(fields=["log", "size"], name="audit_checkpoint_size_idx")]

    def __str__(self) -> str:
        return f"{self.log} size {self.size} at {self.signed_at:%Y-%m-%dT%H:%M:%SZ}"
