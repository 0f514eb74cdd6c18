"""What an operator edits in the admin: provider profiles and accounts, escalation policies.

Each form runs the same validation as the command that loads the same thing from files, and saves
through the same service, so the two surfaces refuse the same things and audit the same way.
"""

from __future__ import annotations

import tomllib
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db.models import QuerySet
from django.http import HttpRequest

from operations.audit import entries as audit
from operations.models import EscalationPolicy, ProviderAccount, ProviderProfile
from operations.notify import store as policy_store
from operations.notify.kinds import SECRET_REF_KINDS, targets_in_order
from operations.notify.policy import ENV_PREFIX, validate_policy
from operations.profiles import (
    FIELD_TO_KEY,
    KEY_TO_FIELD,
    profile_delete,
    profile_save,
    raw_from_model_values,
    validate_profile,
)
from operations.profiles.store import watch_clash_problem

# --- provider profiles and accounts -------------------------------------------------------------------


class ProviderProfileForm(forms.ModelForm):
    """Runs operations.profiles.validate_profile, so the admin cannot save what loadprofiles would refuse."""

    account = forms.CharField(max_length=64, required=False, help_text="Provider account; defaults to the slug.")

    class Meta:
        model = ProviderProfile
        fields = list(KEY_TO_FIELD.values())
        help_texts = {
            "credential_env": (
                "The environment variable holding the credential (PROVIDER_*). It is sent only to the origins "
                "the operator binds it to in PROVIDER_CREDENTIAL_ORIGINS, which no form can change; without a "
                "credential, the URLs must be public https addresses (or in PROVIDER_ALLOWED_ORIGINS)."
            ),
        }

    def clean(self) -> dict[str, Any]:
        # ModelForm.clean returns cleaned_data (the stubs allow None for forms that return nothing).
        super().clean()
        cleaned = self.cleaned_data
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
        clash = watch_clash_problem(
            profile_id=self.instance.pk, credential_env=result.credential_env, status_url=result.status_url
        )
        if clash is not None:
            field = "status_url" if result.status_url != self.instance.status_url else "credential_env"
            self.add_error(field, f"{field}: {clash}")
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
                    "backoff_multiplier",
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
            f"Target kinds: {', '.join(targets_in_order())}. "
            "Webhook URLs and routing keys are never entered here: name the ONCALL_* environment variable "
            "that holds them."
        ),
    )

    class Meta:
        model = EscalationPolicy
        fields = ("name", "description", "repeat_last_level", "ack_timeout_s", "is_default")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if self.instance.pk and not self.is_bound:
            self.initial["levels"] = policy_store.levels_toml(policy_store.policy_of(self.instance))

    def clean(self) -> dict[str, Any]:
        # ModelForm.clean returns cleaned_data (the stubs allow None for forms that return nothing).
        super().clean()
        cleaned = self.cleaned_data
        name = cleaned.get("name") or self.instance.name
        try:
            levels = tomllib.loads(str(cleaned.get("levels", ""))).get("levels")
        except tomllib.TOMLDecodeError as exc:
            self.add_error("levels", f"levels: not valid TOML: {exc}")
            return cleaned
        raw = {
            "name": name,
            "repeat_last_level": cleaned.get("repeat_last_level", 0),
            "ack_timeout_s": cleaned.get("ack_timeout_s"),
            "levels": levels,
        }
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
            for target in (level["targets"] if isinstance(level.get("targets"), list) else [])
            if isinstance(target, dict)
            for kind, value in target.items()
            if kind in SECRET_REF_KINDS and not str(value).startswith(ENV_PREFIX)
        ]
        if not pasted:
            return
        # A bound form's data is the request's QueryDict (the stubs say Mapping): copy() makes it writable.
        data = self.data.copy()  # type: ignore[attr-defined]
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
