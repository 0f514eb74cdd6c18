"""Reaching on-call: escalation policies, each card's run of its policy, and every message sent for it.

- EscalationPolicy / PolicyLevel / PolicyTarget: ordered levels of targets with a wait after each,
  the last level repeated 0-10 times (written only by operations.notify.store, which validates the
  whole policy first). A target that holds a secret (a Slack webhook URL, a PagerDuty routing key)
  stores the NAME of the environment variable that holds it, never the value.
- PolicyRun: the policy's progress on one card (operations.notify.steps.RunState), `step_seq` the
  compare-and-set fence that makes a level go out once whatever process steps it.
- NotificationDelivery: one message to one recipient, written in the transaction that decided it
  and sent by a worker; every row ends sent, failed or skipped, with `detail` saying why, and the
  card lists them all. A message that is not about a card (a callback that gave up, a business
  deadline near) names its operation instead.
- CardResponseCounter: the cumulative histograms of time to acknowledge and to decide (/metrics).
- SlackRefusal: refused Slack interaction and PagerDuty webhook requests, counted per reason and hour.
- PagerDutyEventSeen: the PagerDuty webhook events already acted on (replays change nothing).
"""

from __future__ import annotations

from functools import reduce
from operator import and_

from django.conf import settings
from django.db import models
from django.db.models import Q

from operations.notify import rules
from operations.notify.kinds import TARGETS, Kind, Ref, channels_in_order, targets_in_order
from operations.notify.steps import RunStatus
from operations.vocabulary import choices_of


class EscalationPolicy(models.Model):
    """Who is told about a card, in which order, and how long each level has to acknowledge."""

    name = models.SlugField(max_length=100, unique=True)
    description = models.TextField(blank=True)
    repeat_last_level = models.PositiveSmallIntegerField(default=0)
    # An acknowledged card still undecided this long after the acknowledgement goes back to the
    # policy (PagerDuty's acknowledgement timeout); null: an acknowledgement holds until a decision.
    ack_timeout_s = models.PositiveIntegerField(null=True, blank=True)
    # The admin's default for profiles that name no policy (ESCALATION_DEFAULT_POLICY overrides it).
    is_default = models.BooleanField(default=False)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]
        verbose_name_plural = "escalation policies"
        constraints = [
            models.UniqueConstraint(fields=["is_default"], condition=Q(is_default=True), name="one_default_policy"),
            models.CheckConstraint(condition=Q(repeat_last_level__lte=10), name="policy_repeat_at_most_10"),
        ]

    def __str__(self) -> str:
        return self.name


class PolicyLevel(models.Model):
    policy = models.ForeignKey(EscalationPolicy, on_delete=models.CASCADE, related_name="levels")
    order = models.PositiveSmallIntegerField()  # 0-based
    wait_s = models.PositiveIntegerField()  # after this level, before the next

    class Meta:
        ordering = ["policy", "order"]
        constraints = [
            models.UniqueConstraint(fields=["policy", "order"], name="one_level_per_order"),
            models.CheckConstraint(condition=Q(wait_s__gte=1, wait_s__lte=86400), name="level_wait_1s_to_1d"),
        ]

    def __str__(self) -> str:
        return f"{self.policy_id} level {self.order + 1}"


def _holds(ref: Ref) -> Q:
    return Q(**{f"{ref}__isnull": False}) if ref in (Ref.USER, Ref.GROUP) else ~Q(**{str(ref): ""})


def _empty(ref: Ref) -> Q:
    return Q(**{f"{ref}__isnull": True}) if ref in (Ref.USER, Ref.GROUP) else Q(**{str(ref): ""})


def _fields_match_kind() -> Q:
    """Each kind's value in its own column and every other column empty (operations.notify.kinds.TARGETS)."""
    alternatives = []
    for ref in Ref:
        kinds = sorted(str(kind) for kind, held_in in TARGETS.items() if held_in is ref)
        others = reduce(and_, (_empty(other) for other in Ref if other is not ref))
        alternatives.append(Q(kind__in=kinds) & others & _holds(ref))
    return reduce(lambda a, b: a | b, alternatives)


class PolicyTarget(models.Model):
    # One vocabulary with the pure policy code and the outbox (operations.notify.kinds).
    Kind = Kind

    level = models.ForeignKey(PolicyLevel, on_delete=models.CASCADE, related_name="targets")
    position = models.PositiveSmallIntegerField()
    kind = models.CharField(max_length=16, choices=choices_of(targets_in_order()))
    # PROTECT: deleting a person or group a policy pages must be a conscious edit of the policy first.
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, blank=True, related_name="+"
    )
    group = models.ForeignKey("auth.Group", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    email = models.EmailField(blank=True)
    # A secret target (operations.notify.kinds.Ref.ENV): the NAME of the environment variable holding it.
    env = models.CharField(max_length=100, blank=True)
    channel = models.CharField(max_length=24, blank=True)  # slack_channel: posted with the Slack app's bot token

    class Meta:
        ordering = ["level", "position"]
        constraints = [
            models.UniqueConstraint(fields=["level", "position"], name="one_target_per_position"),
            models.CheckConstraint(name="target_fields_match_kind", condition=_fields_match_kind()),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.ref}"

    @property
    def ref(self) -> str:
        """The target as the policy's TOML names it: a username, group name, address, env name or channel."""
        ref = TARGETS[Kind(self.kind)]
        if ref is Ref.USER:
            return self.user.get_username() if self.user else ""
        if ref is Ref.GROUP:
            return self.group.name if self.group else ""
        return str(getattr(self, str(ref)))


class PolicyRun(models.Model):
    """The policy's progress on one card; its fields are exactly operations.notify.steps.RunState."""

    Status = RunStatus

    escalation = models.OneToOneField(
        "operations.Escalation", on_delete=models.CASCADE, primary_key=True, related_name="policy_run"
    )
    policy_name = models.CharField(max_length=100)
    # The policy as it was when the card opened: an edit never rewrites what a running card does.
    snapshot = models.JSONField()
    status = models.CharField(max_length=16, choices=choices_of(RunStatus))
    round = models.PositiveSmallIntegerField(default=0)
    level = models.SmallIntegerField(default=-1)
    repetition = models.PositiveSmallIntegerField(default=0)
    next_step_at = models.DateTimeField(null=True, blank=True)
    step_seq = models.PositiveIntegerField(default=0)
    # When the current round began (a give-back restarts it at most once per NOTIFY_RESTART_MIN_S),
    # and, while acknowledged, when its next step was due (a give-back that does not restart resumes it).
    round_started_at = models.DateTimeField(null=True, blank=True)
    held_step_at = models.DateTimeField(null=True, blank=True)
    # A responder's snooze: no step before it. While acknowledged under a policy with ack_timeout_s:
    # when the acknowledgement runs out and the policy starts again.
    snoozed_until = models.DateTimeField(null=True, blank=True)
    ack_expires_at = models.DateTimeField(null=True, blank=True)
    updated_at = models.DateTimeField()

    class Meta:
        indexes = [
            models.Index(fields=["next_step_at"], condition=Q(status="running"), name="policy_run_due_idx"),
            models.Index(fields=["ack_expires_at"], condition=Q(status="acknowledged"), name="policy_run_ack_due_idx"),
        ]

    def __str__(self) -> str:
        return f"card {self.escalation_id}: {self.policy_name} ({self.status})"


class NotificationDelivery(models.Model):
    """One message to one recipient about one card: pending until a worker sent it, failed or skipped."""

    # The outbox rules' own enums (operations.notify.rules), not copies: two copies once drifted
    # and a taken-over card could no longer be decided (issue 24).
    State = rules.State
    Event = rules.Event

    # The card the message is about; a message about no card (Event.CALLBACK_FAILED,
    # BUSINESS_DEADLINE_NEAR) names its operation instead.
    escalation = models.ForeignKey(
        "operations.Escalation", on_delete=models.CASCADE, null=True, blank=True, related_name="notifications"
    )
    operation = models.ForeignKey(
        "operations.Operation", on_delete=models.CASCADE, null=True, blank=True, related_name="notices"
    )
    round = models.PositiveSmallIntegerField()
    # The policy level (0-based); -1 for follow-ups and messages outside the policy's levels.
    level = models.SmallIntegerField()
    # The last level's repetition; for messages outside the levels, a per-card counter.
    repetition = models.PositiveIntegerField()
    channel = models.CharField(max_length=16, choices=choices_of(channels_in_order()))
    # An email address, a channel id or the NAME of the variable holding a secret; never a secret.
    address = models.CharField(max_length=254)
    display = models.CharField(max_length=150)  # "alice (oncall)", "PagerDuty", "Slack"
    event = models.CharField(max_length=32, choices=choices_of(rules.Event))
    state = models.CharField(max_length=16, choices=choices_of(rules.State), default=rules.State.PENDING.value)
    attempts = models.PositiveSmallIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    # A follow-up waits for the row before it in its stream (trigger -> acknowledge -> resolve).
    after = models.ForeignKey("self", on_delete=models.PROTECT, null=True, blank=True, related_name="+")
    created_at = models.DateTimeField()
    last_attempt_at = models.DateTimeField(null=True, blank=True)
    finished_at = models.DateTimeField(null=True, blank=True)
    http_status = models.PositiveSmallIntegerField(null=True, blank=True)
    # Outcome in words, e.g. "refused (HTTP 400): Invalid routing key"; never a body, URL or secret.
    detail = models.CharField(max_length=300, blank=True)
    # A Slack app post: "channel/ts", which chat.update needs.
    provider_ref = models.CharField(max_length=64, blank=True)
    # slack_reply only: the click's response_url (a short-lived capability), blanked once the row finishes.
    response_url = models.CharField(max_length=2000, blank=True)
    # What a message outside the levels says beyond the card's facts, in pollerdash's words: a
    # hand-over ("alice handed you this card"), a take-over, an acceptance to confirm; for a
    # slack_reply, "replace" (the message shows the card's new state) or the ephemeral text; for a
    # callback that gave up, "<callback id> <event type>" then, on the next line, why.
    note = models.CharField(max_length=500, blank=True)
    # The person whose act caused the message (a give-back's restart, a hand-over, a take-over, an
    # acceptance to confirm): it counts against their NOTIFY_MAX_PER_ACTOR_PER_HOUR, not everyone's
    # NOTIFY_MAX_PER_HOUR. Null: the policy's own schedule (or an account deleted since).
    caused_by = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.SET_NULL, null=True, blank=True, related_name="+"
    )

    class Meta:
        verbose_name_plural = "notification deliveries"
        ordering = ["created_at", "pk"]
        constraints = [
            # A level goes to each recipient once, whatever process stepped it.
            models.UniqueConstraint(
                fields=["escalation", "round", "level", "repetition", "channel", "address", "event"],
                name="one_notification_per_slot",
            ),
            # A message about no card goes to each recipient once per event of its operation.
            models.UniqueConstraint(
                fields=["operation", "event", "repetition", "channel", "address"],
                condition=Q(escalation__isnull=True),
                name="one_notice_per_slot",
            ),
            models.CheckConstraint(
                condition=Q(escalation__isnull=False) | Q(operation__isnull=False), name="notification_has_a_subject"
            ),
        ]
        indexes = [
            models.Index(fields=["next_attempt_at"], condition=Q(state="pending"), name="notification_due_idx"),
            models.Index(fields=["escalation", "created_at"], name="notification_card_idx"),
            models.Index(fields=["finished_at"], name="notification_finished_idx"),
        ]

    def __str__(self) -> str:
        about = f"card {self.escalation_id}" if self.escalation_id is not None else f"operation {self.operation_id}"
        return f"{about}: {self.event} {self.channel} {self.display} ({self.state})"


class CardResponseCounter(models.Model):
    """One bucket of the time-to-acknowledge or time-to-decide histogram for one (reason, provider).

    Incremented once per card in the transaction that first sets Escalation.first_response_at
    (acknowledge) or closes the card with a decision (decide), so a scrape reads a few rows.
    """

    metric = models.CharField(max_length=8)  # "ack" | "decide"
    reason = models.CharField(max_length=32)
    provider = models.CharField(max_length=64)
    # Where the acknowledgement or decision came from (web, slack, pagerduty, api); empty for cards
    # answered before 2.5, which /metrics shows without the label.
    channel = models.CharField(max_length=16, blank=True, default="")
    bucket = models.CharField(max_length=8)  # an upper bound in seconds, or "+Inf"
    count = models.BigIntegerField(default=0)
    sum_s = models.FloatField(default=0.0)

    class Meta:
        constraints = [
            models.UniqueConstraint(
                fields=["metric", "reason", "provider", "channel", "bucket"], name="one_counter_per_channel_bucket"
            )
        ]

    def __str__(self) -> str:
        return f"{self.metric} {self.reason} {self.provider} <= {self.bucket}: {self.count}"


class SlackRefusal(models.Model):
    """Slack interaction requests refused (bad or stale signature ...), one row per reason and hour:
    unauthenticated junk is counted, never stored, so it cannot fill the database or the audit log."""

    reason = models.CharField(max_length=32)
    hour = models.DateTimeField()
    count = models.PositiveIntegerField(default=0)
    last_at = models.DateTimeField()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["reason", "hour"], name="one_slack_refusal_per_hour")]

    def __str__(self) -> str:
        return f"{self.reason} {self.hour:%Y-%m-%d %H}:00 x{self.count}"


class SlackInteractionSeen(models.Model):
    """A signed Slack interaction request already answered, kept while its signature could still be
    accepted (Slack's 5-minute window): the same request posted again, to this web process or
    another, finds its row and changes nothing. Only requests whose signature verified are written;
    rows older than the window are removed by the next click."""

    # SHA-256 of "<X-Slack-Request-Timestamp>:<X-Slack-Signature>": the signature covers the body.
    request_key = models.CharField(max_length=64, unique=True)
    request_ts = models.BigIntegerField()  # the request's own timestamp (epoch seconds)
    seen_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["request_ts"], name="slack_seen_request_ts")]

    def __str__(self) -> str:
        return f"Slack request {self.request_key[:12]} at {self.request_ts}"


class PagerDutyEventSeen(models.Model):
    """A PagerDuty v3 webhook event already acted on, by its event id: PagerDuty retries a delivery
    with the same event, and a captured request posted again must change nothing. Only events whose
    signature verified are written (escalations.oncall.pagerduty_replays); rows older than KEEP are
    removed, and an event that old is refused by its own `occurred_at` before it gets here."""

    event_id = models.CharField(max_length=100, unique=True)
    occurred_at = models.DateTimeField()
    seen_at = models.DateTimeField()

    class Meta:
        indexes = [models.Index(fields=["occurred_at"], name="pagerduty_seen_occurred")]

    def __str__(self) -> str:
        return f"PagerDuty event {self.event_id}"
