"""Records of what happened, view-only in the admin: operations and their checks, grants and
callbacks, the audit chain, agents and their tokens, cards, decisions and on-call messages."""

from __future__ import annotations

from django.contrib import admin
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.safestring import SafeString

from operations.admin.base import ViewOnlyAdmin, as_text
from operations.models import (
    Agent,
    AgentToken,
    AuditCheckpoint,
    AuditEntry,
    AuditHead,
    Authorization,
    BulkDecision,
    CallbackDelivery,
    CardActivity,
    CardGroup,
    Decision,
    Escalation,
    IdempotencyKey,
    NotificationDelivery,
    Operation,
    PolicyRun,
    StatusCheck,
)

# --- operations and their records -----------------------------------------------------------------


@admin.register(Operation)
class OperationAdmin(ViewOnlyAdmin):
    list_display = (
        "id",
        "provider",
        "status",
        "requests",
        "deadline_at",
        "next_poll_at",
        "lease_owner",
        "lease_expires_at",
        "fence",
    )
    list_filter = ("status", "provider")
    search_fields = ("id", "provider_job_id", "purpose")
    list_select_related = ("provider",)

    @admin.display(description="requests used/max")
    def requests(self, obj: Operation) -> str:
        return f"{obj.status_requests_used}/{obj.max_status_requests}"


@admin.register(StatusCheck)
class StatusCheckAdmin(ViewOnlyAdmin):
    list_display = (
        "operation",
        "sent_at",
        "http_status",
        "provider_state",
        "interpreted_state",
        "decision",
        "delay_source",
        "next_poll_at",
        "fence",
    )
    list_filter = ("interpreted_state", "decision", "delay_source")
    search_fields = ("operation__id", "provider_request_id")


@admin.register(Authorization)
class AuthorizationAdmin(ViewOnlyAdmin):
    list_display = (
        "operation",
        "number",
        "kind",
        "granted_by_label",
        "granted_at",
        "deadline_at",
        "max_status_requests",
        "max_transport_failures",
    )
    list_filter = ("kind",)
    search_fields = ("operation__id", "granted_by_label")


@admin.register(CallbackDelivery)
class CallbackDeliveryAdmin(ViewOnlyAdmin):
    list_display = ("id", "operation", "event_type", "state", "attempts", "last_http_status", "next_attempt_at")
    list_filter = ("state", "event_type")
    search_fields = ("id", "operation__id")
    hidden_fields = ("payload",)
    extra_fields = ("payload_text",)

    @admin.display(description="payload")
    def payload_text(self, obj: CallbackDelivery) -> SafeString:
        return as_text(obj.payload)


# --- audit chain ----------------------------------------------------------------------------------


@admin.register(AuditEntry)
class AuditEntryAdmin(ViewOnlyAdmin):
    list_display = ("seq", "log", "type", "operation_id", "at", "entry_hash")
    list_filter = ("type",)
    search_fields = ("operation_id", "entry_hash")
    # The stored bytes are what was hashed; shown decoded, never as an editable blob.
    hidden_fields = ("body",)
    extra_fields = ("body_text",)

    @admin.display(description="body")
    def body_text(self, obj: AuditEntry) -> SafeString:
        return as_text(obj.body)


@admin.register(AuditCheckpoint)
class AuditCheckpointAdmin(ViewOnlyAdmin):
    list_display = ("log", "size", "signed_at", "key_id", "head_hash")
    list_filter = ("key_id",)


@admin.register(AuditHead)
class AuditHeadAdmin(ViewOnlyAdmin):
    list_display = ("log", "seq", "head_hash")


# --- agents ---------------------------------------------------------------------------------------


@admin.register(Agent)
class AgentAdmin(admin.ModelAdmin):
    list_display = ("name", "created_at")
    search_fields = ("name",)
    # webhook_secret is deliberately absent: it is shown once by create_agent_token, never again.
    fields = ("name", "created_at")
    readonly_fields = ("created_at",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # An agent made here would have no webhook secret; create_agent_token makes both.
        return False


@admin.register(AgentToken)
class AgentTokenAdmin(admin.ModelAdmin):
    list_display = ("prefix", "agent", "created_at", "last_used_at", "revoked_at")
    list_filter = (("revoked_at", admin.EmptyFieldListFilter),)
    search_fields = ("prefix", "agent__name")
    list_select_related = ("agent",)
    # token_sha256 is never shown: the prefix is enough to tell tokens apart.
    fields = ("agent", "prefix", "created_at", "last_used_at", "revoked_at")
    readonly_fields = fields
    actions = ("revoke_tokens",)

    def has_add_permission(self, request: HttpRequest) -> bool:
        # Tokens are made by create_agent_token, the only place the token itself is ever shown.
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        # Revoke instead: the row keeps the record of when the token was used and stopped.
        return False

    @admin.action(description="Revoke selected tokens", permissions=["change"])
    def revoke_tokens(self, request: HttpRequest, queryset: QuerySet[AgentToken]) -> None:
        # Already revoked tokens keep their original revocation time.
        count = queryset.filter(revoked_at__isnull=True).update(revoked_at=timezone.now())
        self.message_user(request, f"Revoked {count} token(s).")


@admin.register(IdempotencyKey)
class IdempotencyKeyAdmin(ViewOnlyAdmin):
    list_display = ("key", "agent", "operation", "created_at")
    search_fields = ("key", "operation__id", "agent__name")


# Cards and decisions: read-only. Decisions are taken on the dashboard, never here, so every one goes
# through the version check, the bounds and the audit chain.
@admin.register(Escalation)
class EscalationAdmin(ViewOnlyAdmin):
    # The credential fingerprint is an HMAC, not the secret, but it has no use for a reader.
    hidden_fields = ("credential_fingerprint",)
    list_display = (
        "id",
        "operation",
        "reason",
        "state",
        "version",
        "opened_at",
        "closed_at",
        "assignee",
        "acknowledged_at",
        "group",
    )
    list_filter = ("state", "reason")
    search_fields = ("operation__id", "detail")
    list_select_related = ("operation", "assignee")


@admin.register(Decision)
class DecisionAdmin(ViewOnlyAdmin):
    list_display = ("id", "decided_at", "username", "user", "operation", "option", "outcome", "card_version")
    list_filter = ("outcome", "decided_at")
    search_fields = ("operation__id", "option", "comment", "username")
    list_select_related = ("user", "operation")


@admin.register(CardActivity)
class CardActivityAdmin(ViewOnlyAdmin):
    list_display = ("id", "at", "username", "kind", "operation", "escalation", "to_username")
    list_filter = ("kind", "at")
    search_fields = ("operation__id", "username", "text")
    list_select_related = ("operation", "escalation")


@admin.register(CardGroup)
class CardGroupAdmin(ViewOnlyAdmin):
    list_display = ("id", "account", "reason", "opened_at", "first_card")
    list_filter = ("reason",)
    search_fields = ("account",)


@admin.register(BulkDecision)
class BulkDecisionAdmin(ViewOnlyAdmin):
    list_display = ("id", "decided_at", "username", "group", "option", "outcome", "requested", "applied")
    list_filter = ("outcome", "decided_at")
    search_fields = ("username", "option", "comment")


# --- on-call policies at work ------------------------------------------------------------------------


@admin.register(PolicyRun)
class PolicyRunAdmin(ViewOnlyAdmin):
    """A card's progress through its policy: written only by the policy steps."""

    list_display = ("escalation", "policy_name", "status", "level", "repetition", "next_step_at")
    list_filter = ("status", "policy_name")


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(ViewOnlyAdmin):
    """Every message sent, failed or skipped about a card (or, for a callback that gave up or a
    business deadline near, about an operation): a record, never edited."""

    # A click's response_url is a short-lived capability to post into a Slack channel.
    hidden_fields = ("response_url",)
    list_display = ("escalation", "operation", "event", "channel", "display", "state", "attempts", "created_at")
    list_filter = ("state", "channel", "event")
