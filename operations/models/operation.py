from __future__ import annotations

from django.db import models
from django.db.models import Q

from operations.vocabulary import (
    NOT_DONE_STATUSES,
    POLLABLE_STATUSES,
    TERMINAL_STATUSES,
    DelaySource,
    Status,
    choices_of,
)

# Warnings shown to agents and people; the oldest are dropped beyond this many.
WARNINGS_KEPT = 20


class Operation(models.Model):
    """One watched provider job and the bounds pollerdash may spend on it (docs/DESIGN.md section 3).

    The row is committed, with its first Authorization, before the first poll. The counters
    `status_requests_used` and `transport_failures_used` only ever grow: every request sent is
    charged before it is sent, including one whose answer is lost.
    """

    id = models.CharField(primary_key=True, max_length=32, editable=False)
    # No index of its own: operation_agent_idx (agent, status, created_at) serves every lookup by
    # agent, and each index is written again by every poll's non-HOT update of the row.
    agent = models.ForeignKey(
        "operations.Agent",
        on_delete=models.PROTECT,
        null=True,
        blank=True,
        related_name="operations",
        db_index=False,
    )
    # Who registered it, for people: "agent:<name>" or "operator:<username>".
    registered_by = models.CharField(max_length=200)
    provider = models.ForeignKey("operations.ProviderProfile", on_delete=models.PROTECT, related_name="operations")
    account = models.CharField(max_length=64)
    provider_job_id = models.CharField(max_length=200)
    # The provider job as the provider sees it: SHA-256 of (credential variable, the status URL
    # with the job id filled in) (operations.providers.origins.watch_key), whatever account label,
    # profile or template it was registered under (re-keyed by 0040); kept current when a profile's
    # credential or status URL changes. Empty on operations that were done before 0027 (only live
    # operations are matched on it).
    watch_key = models.CharField(max_length=64, blank=True)
    request_fingerprint = models.CharField(max_length=200, blank=True)
    purpose = models.TextField(blank=True)
    metadata = models.JSONField(default=dict, blank=True)
    callback_url = models.CharField(max_length=2048, blank=True)

    status = models.CharField(max_length=24, choices=choices_of(Status), default=Status.PENDING.value)
    # Bounds of the current Authorization (copied here so the hot path reads one row).
    deadline_at = models.DateTimeField()
    business_deadline_at = models.DateTimeField(null=True, blank=True)
    max_status_requests = models.PositiveIntegerField()
    max_transport_failures = models.PositiveIntegerField()
    status_requests_used = models.PositiveIntegerField(default=0)
    transport_failures_used = models.PositiveIntegerField(default=0)
    # Consecutive waits decided by local backoff; the exponent of base_delay_s * 2**attempt.
    backoff_attempt = models.PositiveIntegerField(default=0)
    # States a human told pollerdash to treat as pending for this operation (treat_as_pending).
    extra_pending_states = models.JSONField(default=list, blank=True)
    # per_call approval mode: a human approved exactly one status request.
    approved_checks = models.PositiveIntegerField(default=0)
    # Inside a window a human granted ("N minutes / M checks"): the seconds between its checks, which
    # take the place of local backoff (operations/polling/window.py). Null outside such a window.
    check_spacing_s = models.FloatField(null=True, blank=True)
    # What the provider last asked for (Retry-After, poll hint), not capped at the deadline: an
    # extension's first check waits for it.
    provider_wait_until = models.DateTimeField(null=True, blank=True)
    # A person chose to keep polling past the business deadline (a decision taken at or after it):
    # it no longer stops polling.
    business_deadline_waived_at = models.DateTimeField(null=True, blank=True)
    # When on-call was warned that the business deadline is near (the profile's
    # business_deadline_warning_s); set once, so the warning is never sent twice.
    business_deadline_warned_at = models.DateTimeField(null=True, blank=True)

    last_provider_state = models.CharField(max_length=200, blank=True)
    last_http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    last_polled_at = models.DateTimeField(null=True, blank=True)
    next_poll_at = models.DateTimeField(null=True, blank=True)
    delay_source = models.CharField(max_length=32, choices=choices_of(DelaySource), blank=True)
    progress_percent = models.PositiveSmallIntegerField(null=True, blank=True)
    progress_counts = models.JSONField(null=True, blank=True)

    # The single owner of the next poll: the dispatcher's claim, carried by the worker.
    lease_owner = models.CharField(max_length=200, blank=True)
    lease_expires_at = models.DateTimeField(null=True, blank=True)
    fence = models.BigIntegerField(default=0)
    # When the current claim was made and the due time it served (dispatch lag = start - due).
    claimed_at = models.DateTimeField(null=True, blank=True)
    claim_due_at = models.DateTimeField(null=True, blank=True)

    sequence = models.BigIntegerField(default=1)
    result = models.JSONField(null=True, blank=True)
    error = models.JSONField(null=True, blank=True)
    warnings = models.JSONField(default=list, blank=True)

    cancel_requested_at = models.DateTimeField(null=True, blank=True)
    cancel_reason = models.CharField(max_length=280, blank=True)
    # a CancelState (operations.vocabulary), or empty when no cancel was asked for
    cancel_state = models.CharField(max_length=24, blank=True)

    created_at = models.DateTimeField()
    updated_at = models.DateTimeField()
    completed_at = models.DateTimeField(null=True, blank=True)
    acknowledged_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        constraints = [
            # One live agent watch per provider job, keyed on what the provider sees (credential
            # variable, status-URL origin, job id), not on the account label or the profile: two
            # profiles that reach one job with one credential are one job to the provider. A
            # provider cancel ends the job for every watcher, so a second agent must never hold a
            # watch it could cancel; two registrations at once cannot both win. The same agent's
            # second register replays or conflicts; an operator may watch a job twice on purpose
            # (`watch --again`), and an agent is refused a job an operator watches at registration
            # (operations.agents.registration).
            models.UniqueConstraint(
                fields=["watch_key"],
                condition=Q(status__in=sorted(s.value for s in NOT_DONE_STATUSES), agent__isnull=False),
                name="one_live_agent_watch_per_provider_job",
            ),
            models.CheckConstraint(
                condition=Q(status_requests_used__lte=models.F("max_status_requests")),
                name="requests_used_within_budget",
            ),
        ]
        indexes = [
            # The dispatcher's due scan touches only pollable rows.
            models.Index(
                fields=["next_poll_at"],
                condition=Q(status__in=sorted(s.value for s in POLLABLE_STATUSES)),
                name="operation_due_idx",
            ),
            models.Index(
                fields=["deadline_at"],
                condition=Q(status__in=sorted(s.value for s in POLLABLE_STATUSES)),
                name="operation_deadline_idx",
            ),
            # The dispatcher's business-deadline sweep and early warning.
            models.Index(
                fields=["business_deadline_at"],
                condition=Q(status__in=sorted(s.value for s in POLLABLE_STATUSES), business_deadline_at__isnull=False),
                name="operation_business_idx",
            ),
            models.Index(fields=["agent", "status", "created_at"], name="operation_agent_idx"),
            # The operations list's "All" tab (newest first), 50 rows of 100,000 without a sort
            # (docs/benchmarks.md, issue 29); its search has trigram indexes (migration 0041).
            models.Index(fields=["-created_at", "-id"], name="operation_created_idx"),
            models.Index(fields=["status", "created_at"], name="operation_status_idx"),
            models.Index(fields=["provider_job_id"], name="operation_job_idx"),
            # Live watches are found by key too: another template may reach one URL with another job id.
            models.Index(
                fields=["watch_key"],
                condition=Q(status__in=sorted(s.value for s in NOT_DONE_STATUSES)),
                name="operation_watch_key_idx",
            ),
        ]

    def __str__(self) -> str:
        return self.id

    def warnings_with(self, *new: str) -> list[str]:
        """The warnings list with `new` appended, keeping the newest WARNINGS_KEPT."""
        return [*(self.warnings or []), *new][-WARNINGS_KEPT:]

    @property
    def done(self) -> bool:
        return self.status in TERMINAL_STATUSES

    @property
    def requests_left(self) -> int:
        return max(0, self.max_status_requests - self.status_requests_used)
