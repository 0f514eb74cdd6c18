"""The entry types of the audit chain and the exact keys of each type's `data`.

`audit.append` fills absent keys with null and refuses unknown ones, so each type has exactly one
canonical shape. Add a type here before appending it.
"""

from __future__ import annotations

DATA_KEYS: dict[str, tuple[str, ...]] = {
    "operation.registered": (
        "provider",
        "provider_job_id",
        "account",
        "purpose",
        "registered_by",
        "deadline",
        "business_deadline",
        "max_requests",
        "max_transport_failures",
        "next_poll_at",
    ),
    "controller.decision": (
        "state",
        "next_poll_at",
        "delay_source",
        "delay_ms",
        "request_count",
        "max_requests",
        "transport_failures",
        "max_transport_failures",
        "deadline",
        "http_status",
        "provider_state",
        "provider_request_id",
        "retry_after",
        "interpreted_state",
        "decision",
        "reason",
    ),
    "escalation.opened": (
        "escalation_id",
        "reason",
        "detail",
        "request_count",
        "max_requests",
        "deadline",
    ),
    # An escalation policy created, changed or deleted (operations/notify/store.py): `policy` is the
    # whole policy after the change (levels, waits, targets by name; env names, never a secret).
    "policy.changed": ("name", "change", "policy", "is_default"),
    "provider.paused": ("account", "paused_until", "http_status", "reason"),
    "operation.cancelled": ("state", "reason", "cancel_state", "http_status"),
    "operation.acknowledged": ("state",),
    "operation.cancel_forwarded": ("cancel_state", "http_status", "provider_state", "provider_request_id", "detail"),
    "human.decision": (
        "escalation_id",
        "decision_id",
        "option",
        "outcome",
        "comment",
        "card_version",
        "card_sha256",
        "state",
        "new_deadline",
        "new_max_requests",
        "authorization_number",
        "http_status",
        "next_poll_at",
        "pending_state",
        "confirms_decision_id",
        "check_spacing_ms",
        # How and when the decider authenticated (operations.cards.signin): every human entry.
        "authentication",
        # Where the act came from (web, slack, pagerduty, api) and the identity that channel
        # verified ("slack:T1/U1", "pagerduty:P1"; null on the web): every human entry from 2.5.
        "channel",
        "channel_identity",
    ),
    "human.inspect": (
        "escalation_id",
        "decision_id",
        "card_version",
        "console_url",
        "authentication",
        "channel",
        "channel_identity",
    ),
    "human.refused": (
        "escalation_id",
        "decision_id",
        "option",
        "card_version",
        "reason",
        "authentication",
        "channel",
        "channel_identity",
    ),
    # Ownership and notes (operations/lifecycle/ownership.py): they decide nothing and move no card
    # version; `activity_id` is the CardActivity row, `previous_holder` the username that held the
    # card before (a take-over or a hand-over), `to` the username it was handed to.
    "human.acknowledged": (
        "escalation_id",
        "activity_id",
        "previous_holder",
        "card_version",
        "channel",
        "channel_identity",
    ),
    "human.unacknowledged": ("escalation_id", "activity_id", "card_version", "channel", "channel_identity"),
    "human.reassigned": (
        "escalation_id",
        "activity_id",
        "to",
        "previous_holder",
        "takeover",
        "card_version",
        "channel",
        "channel_identity",
    ),
    "human.note": ("escalation_id", "activity_id", "text", "card_version", "channel", "channel_identity"),
    # What a channel reported on an open card that changed nothing (operations.lifecycle.ownership.
    # add_notice): actor {"kind": <channel>, "id": <the identity it verified>}, `event` the channel's
    # own event type ("incident.resolved"), `text` the card's words.
    "oncall.notice": (
        "escalation_id",
        "activity_id",
        "card_version",
        "channel",
        "channel_identity",
        "event",
        "text",
    ),
    # A responder silenced the card's reminders until `until` (`minutes`: 15, 60 or 240).
    "human.snoozed": (
        "escalation_id",
        "activity_id",
        "until",
        "minutes",
        "card_version",
        "channel",
        "channel_identity",
    ),
    # The policy's ack_timeout_s ran out with the card undecided (actor: the system): the
    # acknowledgement `acknowledged_by` gave at `acknowledged_at` was withdrawn, the policy restarted.
    "escalation.ack_expired": (
        "escalation_id",
        "activity_id",
        "acknowledged_by",
        "acknowledged_at",
        "ack_timeout_s",
        "card_version",
        "channel",
        "channel_identity",
    ),
    # One option applied to selected cards of a group (operations/decisions/bulk.py); no operation of
    # its own: each member applied has its own human.decision entry. `refused` lists
    # {"escalation_id", "reason"} per member refused, or per reason the whole was (escalation_id null).
    "human.bulk_decision": (
        "group_id",
        "bulk_id",
        "option",
        "outcome",
        "comment",
        "requested",
        "applied",
        "applied_escalation_ids",
        "refused",
    ),
    # cancel_at_provider: the provider's answer to the one cancel request a human decided to send.
    "provider.cancel_response": (
        "escalation_id",
        "decision_id",
        "cancel_state",
        "http_status",
        "provider_state",
        "provider_request_id",
        "state",
    ),
    "callback.failed": ("event_id", "event_type", "attempts", "http_status", "reason"),
    # The profile's business_deadline_warning_s reached: on-call was told, once per operation.
    "operation.business_deadline_near": ("state", "business_deadline", "deadline", "warning_s"),
    # A provider profile created, changed or deleted (admin or loadprofiles): `fields` names every
    # changed field; before/after hold the values of the ones that say where a credential goes and
    # how answers are read (URLs, the credential variable's name, the state table), never a secret.
    "profile.changed": ("slug", "change", "fields", "before", "after"),
    # People (operations/people.py): roles are groups plus the staff and superuser flags;
    # `before` / `after` hold {"groups", "is_staff", "is_superuser"}.
    "user.created": ("user_id", "username", "is_active", "groups", "is_staff", "is_superuser"),
    "user.renamed": ("user_id", "username", "old_username"),
    "user.roles_changed": ("user_id", "username", "before", "after"),
    "user.deactivated": ("user_id", "username"),
    "user.reactivated": ("user_id", "username"),
    "user.deleted": ("user_id", "username", "groups", "is_staff", "is_superuser"),
    # Password sign-in paused after LOGIN_FAILURE_LIMIT failures for this username from this address
    # (accounts/throttle.py; actor: the throttle).
    "signin.locked_out": ("username", "ip_address", "failures", "locked_minutes"),
    # `manage.py archive` (operations/audit/archive.py): entries first_seq..last_seq went to the
    # archive `name` (its SHA-256 and length), sealed by the tree root at last_seq; then removed.
    "audit.archived": ("first_seq", "last_seq", "name", "sha256", "bytes", "root"),
}
