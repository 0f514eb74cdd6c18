from __future__ import annotations

from django.db import models

from operations.polling.schedule import MAX_BACKOFF_MULTIPLIER, MIN_BACKOFF_MULTIPLIER


class ProviderProfile(models.Model):
    """One integration's state table and polling policy (docs/DESIGN.md section 2).

    Validation of a whole profile lives in operations/profiles/ (spec.py), shared by `loadprofiles` and
    the admin form, so a profile can never be saved half-valid from either side.
    """

    class ApprovalMode(models.TextChoices):
        SESSION = "session", "session"
        PER_CALL = "per_call", "per call"

    slug = models.SlugField(max_length=64, unique=True)
    name = models.CharField(max_length=200)
    # Provider account context: rate limits and provider-wide pauses apply per account, across
    # every profile that names it.
    account = models.CharField(max_length=64)
    status_url = models.CharField(max_length=500)
    job_id_pattern = models.CharField(max_length=500)
    state_field = models.CharField(max_length=200)
    pending_states = models.JSONField(default=list, blank=True)
    success_states = models.JSONField(default=list, blank=True)
    failure_states = models.JSONField(default=list, blank=True)
    cancelled_states = models.JSONField(default=list, blank=True)
    expired_states = models.JSONField(default=list, blank=True)
    required_result_fields = models.JSONField(default=list, blank=True)
    expiry_field = models.CharField(max_length=200, blank=True)
    progress_field = models.CharField(max_length=200, blank=True)
    counts_fields = models.JSONField(default=dict, blank=True)
    poll_hint_seconds_field = models.CharField(max_length=200, blank=True)
    poll_hint_time_field = models.CharField(max_length=200, blank=True)
    request_id_header = models.CharField(max_length=100, blank=True)
    credential_env = models.CharField(max_length=100, blank=True)
    auth_scheme = models.CharField(max_length=40, blank=True, default="Bearer")
    base_delay_s = models.FloatField(default=5)
    max_delay_s = models.FloatField(default=120)
    # Local backoff grows by this factor a wait: base * multiplier**attempt (2 doubles each wait).
    backoff_multiplier = models.FloatField(default=2)
    jitter_floor = models.FloatField(default=0.5)
    default_deadline_s = models.PositiveIntegerField(default=2400)
    default_max_status_requests = models.PositiveIntegerField(default=12)
    default_max_transport_failures = models.PositiveIntegerField(default=3)
    not_found_grace_s = models.FloatField(default=60)
    rate_limit_per_s = models.FloatField(default=10)
    cancel_method = models.CharField(max_length=10, blank=True)
    cancel_url = models.CharField(max_length=500, blank=True)
    console_url = models.CharField(max_length=500, blank=True)
    approval_mode = models.CharField(max_length=10, choices=ApprovalMode.choices, default=ApprovalMode.SESSION)
    extension_options = models.JSONField(default=list, blank=True)
    max_extensions = models.PositiveIntegerField(default=3)
    # Optional: tell on-call this many seconds before an operation's business deadline while its
    # job is still running (a notification, not a card).
    business_deadline_warning_s = models.PositiveIntegerField(
        null=True,
        blank=True,
        help_text="Seconds before an operation's business deadline to warn on-call while the job still runs "
        "(a notification, not a card); 1 s to 7 days, empty for no warning.",
    )
    # The name of the escalation policy that tells people about this profile's cards; empty: the
    # default policy (docs/DESIGN.md, "Reaching on-call"). A name, like the TOML key, so the profile
    # machinery stays one table; the loader and the admin check that the policy exists, and a
    # policy named by a profile cannot be deleted.
    escalation_policy = models.CharField(max_length=100, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["slug"]
        constraints = [
            # The profile checks refuse these too; this holds for rows written around them.
            models.CheckConstraint(
                condition=models.Q(
                    backoff_multiplier__gte=MIN_BACKOFF_MULTIPLIER, backoff_multiplier__lte=MAX_BACKOFF_MULTIPLIER
                ),
                name="profile_backoff_multiplier_1_to_4",
            ),
        ]

    def __str__(self) -> str:
        return self.slug

    @property
    def has_cancel(self) -> bool:
        return bool(self.cancel_method and self.cancel_url)
