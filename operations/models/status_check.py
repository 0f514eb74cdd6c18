from __future__ import annotations

from django.db import models


class StatusCheck(models.Model):
    """One status request sent to a provider, and what pollerdash made of its answer.

    The row is written in the same transaction that charges the request (before sending), so a
    request whose answer is lost still shows as sent; the answer and the decision fill it in.
    """

    # No index of its own (nor its LIKE twin): statuscheck_op_idx (operation, sent_at) serves every
    # lookup by operation, and every poll inserts a check into each index of this table.
    operation = models.ForeignKey(
        "operations.Operation", on_delete=models.CASCADE, related_name="checks", db_index=False
    )
    # Provider account, copied so pacing can count recent sends per account with one index scan.
    account = models.CharField(max_length=64)
    fence = models.BigIntegerField()
    due_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField()
    sent_at = models.DateTimeField()
    received_at = models.DateTimeField(null=True, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    provider_request_id = models.CharField(max_length=200, blank=True)
    retry_after = models.CharField(max_length=200, blank=True)
    body_digest = models.CharField(max_length=64, blank=True)
    body_bytes = models.PositiveIntegerField(null=True, blank=True)
    # timeout | connect_error | body_too_large | invalid_json | redirect | ... (empty when none)
    transport_error = models.CharField(max_length=40, blank=True)
    provider_state = models.CharField(max_length=200, blank=True)
    interpreted_state = models.CharField(max_length=40, blank=True)
    decision = models.CharField(max_length=40, blank=True)
    reason = models.TextField(blank=True)
    delay_source = models.CharField(max_length=32, blank=True)
    delay_ms = models.BigIntegerField(null=True, blank=True)
    next_poll_at = models.DateTimeField(null=True, blank=True)
    charged_transport = models.BooleanField(default=False)
    warnings = models.JSONField(default=list, blank=True)

    class Meta:
        ordering = ["sent_at"]
        indexes = [
            models.Index(fields=["operation", "sent_at"], name="statuscheck_op_idx"),
            models.Index(fields=["account", "sent_at"], name="statuscheck_account_idx"),
            models.Index(fields=["sent_at"], name="statuscheck_sent_idx"),
        ]

    def __str__(self) -> str:
        return f"{self.operation_id} @ {self.sent_at:%H:%M:%S}"

    @property
    def dispatch_lag_s(self) -> float | None:
        if self.due_at is None:
            return None
        return (self.started_at - self.due_at).total_seconds()
