"""Django admin for the operations app.

Profiles are edited here through the same validation as `loadprofiles`. Everything that is a
record of what happened (operations, status checks, authorizations, the audit chain, callbacks)
is view-only: changes to those go through the services, which bump sequences and append to the
audit chain, never through a form. Secrets (token hashes, webhook secrets) are never shown.

django-q2's own models (schedules, tasks, the queue) are view-only too: a schedule's `func` is any
importable callable run on a worker, so a writable Schedule form is code execution on the hosts
that hold the credentials. pollerdash writes the schedules it needs itself (task_registry.py).
"""

from __future__ import annotations

import tomllib

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django_q.models import Failure, OrmQ, Schedule, Success

from operations.audit import entries as audit
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
    EscalationPolicy,
    IdempotencyKey,
    NotificationDelivery,
    Operation,
    PolicyRun,
    ProviderAccount,
    ProviderProfile,
    StatusCheck,
)
from operations.notify import store as policy_store
from operations.notify.policy import ENV_PREFIX, SECRET_REF_KINDS, validate_policy
from operations.profiles import (
    FIELD_TO_KEY,
    KEY_TO_FIELD,
    profile_delete,
    profile_save,
    raw_from_model_values,
    validate_profile,
)


class ViewOnlyAdmin(admin.ModelAdmin):
    """Shows every field of a record and allows no add, change or delete."""

    # Fields never shown (secrets, raw bytes shown decoded by a method instead).
    hidden_fields: tuple[str, ...] = ()
    # Display methods shown after the model's own fields.
    extra_fields: tuple[str, ...] = ()

    class Media:
        # .pd-wrap for raw bodies: a class, because the Content-Security-Policy refuses style attributes.
        css = {"all": ["css/admin.css"]}

    def get_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        names = [f.name for f in self.model._meta.fields if f.name not in self.hidden_fields]
        return [*names, *self.extra_fields]

    def get_readonly_fields(self, request: HttpRequest, obj: object = None) -> list[str]:
        return self.get_fields(request, obj)

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


def _as_text(raw: bytes | memoryview | None) -> SafeString:
    # BinaryField comes back as memoryview on PostgreSQL and bytes on SQLite.
    text = bytes(raw or b"").decode("utf-8", errors="replace")
    return format_html('<pre class="pd-wrap">{}</pre>', text)


# --- provider profiles and accounts -------------------------------------------------------------------


class ProviderProfileForm(forms.ModelForm):
    """Runs operations.profiles.validate_profile, so the admin cannot save what loadprofiles would refuse."""

    account = forms.CharField(max_length=64, required=False, help_text="Provider account; defaults to the slug.")

    class Meta:
        model = ProviderProfile
        fields = list(KEY_TO_FIELD.values())

    def clean(self) -> dict[str, object]:
        cleaned = super().clean()
        # A field whose input could not even be parsed (bad JSON, a word in a number) already
        # carries its error; repeating it as "is required" would only confuse.
        unparsed = set(self.errors)
        raw = raw_from_model_values(values={name: cleaned[name] for name in FIELD_TO_KEY if name in cleaned})
        result = validate_profile(raw=raw)
        if isinstance(result, list):
            for problem in result:
                field_name = KEY_TO_FIELD.get(problem.key)
                if field_name in unparsed:
                    continue
                self.add_error(field_name if field_name in self.fields else None, f"{problem.key}: {problem.message}")
            return cleaned
        if policy_store.missing_policies(names={result.escalation_policy} - {""}):
            self.add_error("escalation_policy", f"escalation_policy: no policy named {result.escalation_policy!r}")
            return cleaned
        # Save exactly what loadprofiles would: defaults filled in, floats as floats.
        cleaned.update(result.model_values())
        return cleaned


@admin.register(ProviderProfile)
class ProviderProfileAdmin(admin.ModelAdmin):
    form = ProviderProfileForm
    list_display = ("slug", "name", "account", "approval_mode", "rate_limit_per_s")
    list_filter = ("approval_mode", "account")
    search_fields = ("slug", "name", "account")
    readonly_fields = ("created_at", "updated_at")
    fieldsets = (
        (None, {"fields": ("slug", "name", "account", "approval_mode")}),
        ("Status endpoint", {"fields": ("status_url", "job_id_pattern", "request_id_header")}),
        ("Credential", {"fields": ("credential_env", "auth_scheme")}),
        (
            "State table",
            {
                "fields": (
                    "state_field",
                    "pending_states",
                    "success_states",
                    "failure_states",
                    "cancelled_states",
                    "expired_states",
                )
            },
        ),
        (
            "Result and progress",
            {
                "fields": (
                    "required_result_fields",
                    "expiry_field",
                    "progress_field",
                    "counts_fields",
                    "poll_hint_seconds_field",
                    "poll_hint_time_field",
                )
            },
        ),
        (
            "Polling policy",
            {
                "fields": (
                    "base_delay_s",
                    "max_delay_s",
                    "jitter_floor",
                    "default_deadline_s",
                    "default_max_status_requests",
                    "default_max_transport_failures",
                    "not_found_grace_s",
                    "rate_limit_per_s",
                )
            },
        ),
        (
            "Escalation",
            {
                "fields": (
                    "cancel_method",
                    "cancel_url",
                    "console_url",
                    "extension_options",
                    "max_extensions",
                    "business_deadline_warning_s",
                )
            },
        ),
        ("Reaching on-call", {"fields": ("escalation_policy",)}),
        ("Record", {"fields": ("created_at", "updated_at")}),
    )

    def save_model(self, request: HttpRequest, obj: ProviderProfile, form: forms.ModelForm, change: bool) -> None:
        # Through the service, as loadprofiles does: the account row exists and an audit entry
        # names who changed what.
        profile_save(profile=obj, actor=audit.user_actor(request.user))

    def delete_model(self, request: HttpRequest, obj: ProviderProfile) -> None:
        profile_delete(profile=obj, actor=audit.user_actor(request.user))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[ProviderProfile]) -> None:
        for profile in queryset:
            profile_delete(profile=profile, actor=audit.user_actor(request.user))


# --- escalation policies --------------------------------------------------------------------------------


class EscalationPolicyForm(forms.ModelForm):
    """A policy edited as loadpolicies reads it: the levels as TOML, validated whole by the same
    function (operations.notify.policy.validate_policy), so the two surfaces refuse the same things."""

    levels = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 12, "cols": 90, "spellcheck": "false"}),
        help_text=(
            "[[levels]] tables, in order: wait_s (whole seconds before the next level, 1-86400) and targets, "
            'e.g. targets = [{ user = "alice" }, { group = "oncall" }, { email = "team@example.com" }, '
            '{ slack_webhook = "ONCALL_SLACK_PAYMENTS" }, { pagerduty = "ONCALL_PD_PAYMENTS" }]. '
            "Webhook URLs and routing keys are never entered here: name the ONCALL_* environment variable "
            "that holds them."
        ),
    )

    class Meta:
        model = EscalationPolicy
        fields = ("name", "description", "repeat_last_level", "is_default")

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["levels"] = policy_store.levels_toml(policy_store.policy_of(self.instance))

    def clean(self) -> dict[str, object]:
        cleaned = super().clean()
        name = cleaned.get("name") or self.instance.name
        try:
            levels = tomllib.loads(str(cleaned.get("levels", ""))).get("levels")
        except tomllib.TOMLDecodeError as exc:
            self.add_error("levels", f"levels: not valid TOML: {exc}")
            return cleaned
        raw = {"name": name, "repeat_last_level": cleaned.get("repeat_last_level", 0), "levels": levels}
        result = validate_policy(raw, directory=policy_store.directory())
        if isinstance(result, list):
            self._forget_pasted_secrets(levels)
            for problem in result:
                field = problem.key.split("[", 1)[0].split(".", 1)[0]
                self.add_error(field if field in self.fields else None, str(problem))
            return cleaned
        cleaned["policy"] = result
        return cleaned

    def _forget_pasted_secrets(self, levels: object) -> None:
        """A webhook URL or routing key pasted where its variable's name belongs is refused; the form
        shown again must not carry it back to the page (or to whoever looks over the shoulder)."""
        pasted = [
            str(value)
            for level in (levels if isinstance(levels, list) else [])
            if isinstance(level, dict)
            for target in (level.get("targets") if isinstance(level.get("targets"), list) else [])
            if isinstance(target, dict)
            for kind, value in target.items()
            if kind in SECRET_REF_KINDS and not str(value).startswith(ENV_PREFIX)
        ]
        if not pasted:
            return
        data = self.data.copy()
        text = str(data.get("levels", ""))
        for value in pasted:
            text = text.replace(value, "ONCALL_NAME_OF_THE_VARIABLE")
        data["levels"] = text
        self.data = data


@admin.register(EscalationPolicy)
class EscalationPolicyAdmin(admin.ModelAdmin):
    form = EscalationPolicyForm
    list_display = ("name", "is_default", "repeat_last_level", "updated_at")
    search_fields = ("name", "description")
    readonly_fields = ("updated_at",)

    def get_readonly_fields(self, request: HttpRequest, obj: EscalationPolicy | None = None) -> tuple[str, ...]:
        # A rename would detach the policy from the profiles that name it: make a new one instead.
        return ("name", "updated_at") if obj is not None else ("updated_at",)

    def save_model(self, request: HttpRequest, obj: EscalationPolicy, form: forms.ModelForm, change: bool) -> None:
        policy = form.cleaned_data["policy"]
        policy_store.policies_save(
            policies=[policy],
            actor=audit.user_actor(request.user),
            descriptions={policy.name: form.cleaned_data.get("description", "")},
            default=bool(form.cleaned_data.get("is_default")),
        )
        obj.pk = EscalationPolicy.objects.get(name=policy.name).pk

    def save_related(self, request: HttpRequest, form: forms.ModelForm, formsets: object, change: bool) -> None:
        """Levels and targets were written by the store with the policy."""

    def delete_model(self, request: HttpRequest, obj: EscalationPolicy) -> None:
        try:
            policy_store.policy_delete(row=obj, actor=audit.user_actor(request.user))
        except policy_store.PoliciesInvalid as exc:
            self.message_user(request, str(exc), level=messages.ERROR)

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[EscalationPolicy]) -> None:
        for row in queryset:
            self.delete_model(request, row)


@admin.register(PolicyRun)
class PolicyRunAdmin(ViewOnlyAdmin):
    """A card's progress through its policy: written only by the policy steps."""

    list_display = ("escalation", "policy_name", "status", "level", "repetition", "next_step_at")
    list_filter = ("status", "policy_name")


@admin.register(NotificationDelivery)
class NotificationDeliveryAdmin(ViewOnlyAdmin):
    """Every message sent, failed or skipped about a card: a record, never edited."""

    # A click's response_url is a short-lived capability to post into a Slack channel.
    hidden_fields = ("response_url",)
    list_display = ("escalation", "event", "channel", "display", "state", "attempts", "created_at")
    list_filter = ("state", "channel", "event")


@admin.register(ProviderAccount)
class ProviderAccountAdmin(admin.ModelAdmin):
    """Accounts come from profiles; an operator may lift or annotate a provider-wide pause."""

    list_display = ("name", "paused_until", "pause_reason", "updated_at")
    search_fields = ("name",)
    fields = ("name", "paused_until", "pause_reason", "updated_at")
    # Renaming would detach the account from the profiles and operations that name it.
    readonly_fields = ("name", "updated_at")

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


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
        return _as_text(obj.payload)


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
        return _as_text(obj.body)


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


# --- django-q2: view-only ---------------------------------------------------------------------


for _model in (Schedule, Success, Failure, OrmQ):
    if admin.site.is_registered(_model):
        admin.site.unregister(_model)


@admin.register(Schedule)
class ScheduleAdmin(ViewOnlyAdmin):
    list_display = ("id", "name", "func", "schedule_type", "minutes", "repeats", "next_run")
    list_filter = ("schedule_type",)
    search_fields = ("name", "func")


@admin.register(Success)
class SuccessAdmin(ViewOnlyAdmin):
    list_display = ("name", "func", "group", "started", "stopped")
    search_fields = ("name", "func", "group")


@admin.register(Failure)
class FailureAdmin(ViewOnlyAdmin):
    list_display = ("name", "func", "group", "started", "stopped", "attempt_count")
    search_fields = ("name", "func", "group")


@admin.register(OrmQ)
class QueueAdmin(ViewOnlyAdmin):
    list_display = ("id", "name", "func", "lock")
    # The payload is a signed pickle; name and func are read from it by the model's methods.
    hidden_fields = ("payload",)
    extra_fields = ("name", "func")
