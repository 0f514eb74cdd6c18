"""The one write service for profiles: create, change and delete, each with its `profile.changed` entry."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum

from django.db import transaction

from operations.audit import entries as audit
from operations.lifecycle.registration import rekey_watches
from operations.models import ProviderAccount, ProviderProfile
from operations.profiles.checks import FIELD_TO_KEY, STATE_KEYS
from operations.profiles.files import ProfilesInvalid
from operations.profiles.spec import ProfileSpec
from operations.selectors import watch_clashes


# TOML key -> model field. Only the five state sets are named differently in the file.
class Outcome(StrEnum):
    CREATED = "created"
    UPDATED = "updated"
    UNCHANGED = "unchanged"


@dataclass(frozen=True)
class ApplyResult:
    slug: str
    outcome: Outcome
    changed_fields: tuple[str, ...] = ()


# --- the write service ----------------------------------------------------------------------------


def profiles_apply(*, specs: Sequence[ProfileSpec], actor: Mapping[str, str]) -> list[ApplyResult]:
    """Create or update profiles by slug in one transaction, and make sure each one's account exists.

    Only changed fields are written, so re-applying the same file reports every profile unchanged
    and leaves `updated_at` alone. Each created or changed profile writes a `profile.changed`
    audit entry naming `actor` (e.g. operator:loadprofiles) and what changed. A change of
    credential variable or status URL carries its live operations' watch keys along; one that
    would make two agents watch one provider job is refused (ProfilesInvalid), nothing written.
    """
    slugs = [spec.slug for spec in specs]
    if len(set(slugs)) != len(slugs):
        raise ValueError("profiles_apply: each slug may appear once")
    results: list[ApplyResult] = []
    with transaction.atomic():
        existing = {p.slug: p for p in ProviderProfile.objects.select_for_update().filter(slug__in=slugs)}
        for spec in specs:
            values = spec.model_values()
            ProviderAccount.objects.get_or_create(name=spec.account)
            profile = existing.get(spec.slug)
            if profile is None:
                ProviderProfile.objects.create(**values)
                _audit_change(actor=actor, change="created", slug=spec.slug, before=None, after=values)
                results.append(ApplyResult(slug=spec.slug, outcome=Outcome.CREATED))
                continue
            before = _values_of(profile)
            changed = tuple(name for name, value in values.items() if before[name] != value)
            if not changed:
                results.append(ApplyResult(slug=spec.slug, outcome=Outcome.UNCHANGED))
                continue
            for name in changed:
                setattr(profile, name, values[name])
            _refuse_watch_clashes(profile=profile, changed=changed)
            profile.save(update_fields=[*changed, "updated_at"])
            _follow_watches(profile=profile, changed=changed)
            _audit_change(actor=actor, change="updated", slug=spec.slug, before=before, after=values)
            results.append(ApplyResult(slug=spec.slug, outcome=Outcome.UPDATED, changed_fields=changed))
    return results


def profile_save(*, profile: ProviderProfile, actor: Mapping[str, str]) -> tuple[str, ...]:
    """Save a profile edited in the admin (already validated by its form); returns the changed fields."""
    with transaction.atomic():
        stored = ProviderProfile.objects.select_for_update().filter(pk=profile.pk).first() if profile.pk else None
        before = None if stored is None else _values_of(stored)
        after = _values_of(profile)
        changed = tuple(after) if before is None else tuple(name for name in after if before[name] != after[name])
        _refuse_watch_clashes(profile=profile, changed=changed)
        profile.save()
        _follow_watches(profile=profile, changed=changed)
        # As loadprofiles does: the account's pacing row exists before any operation needs it.
        ProviderAccount.objects.get_or_create(name=profile.account)
        if changed:
            _audit_change(
                actor=actor,
                change="created" if before is None else "updated",
                slug=profile.slug,
                before=before,
                after=after,
            )
    return changed


# What decides which provider job a profile's operations reach (operations.providers.origins.watch_key).
WATCH_FIELDS = ("credential_env", "status_url")


def watch_clash_problem(*, profile_id: int | None, credential_env: str, status_url: str) -> str | None:
    """Why a profile may not take this credential variable and status URL while its operations run, or None."""
    clashes = watch_clashes(profile_id=profile_id, credential_env=credential_env, status_url=status_url)
    if not clashes:
        return None
    return (
        f"{clashes} live operation(s) of this profile would then watch a provider job (same credential, origin "
        "and job id) that another client's live operation already watches; change it once they are done"
    )


def _refuse_watch_clashes(*, profile: ProviderProfile, changed: Sequence[str]) -> None:
    if profile.pk is None or not set(changed) & set(WATCH_FIELDS):
        return
    problem = watch_clash_problem(
        profile_id=profile.pk, credential_env=profile.credential_env, status_url=profile.status_url
    )
    if problem is not None:
        field = "status_url" if "status_url" in changed else "credential_env"
        raise ProfilesInvalid([f"{profile.slug}: {field}: {problem}"])


def _follow_watches(*, profile: ProviderProfile, changed: Sequence[str]) -> None:
    if set(changed) & set(WATCH_FIELDS):
        rekey_watches(profile=profile)


def profile_delete(*, profile: ProviderProfile, actor: Mapping[str, str]) -> None:
    """Delete a profile no operation uses (the database refuses otherwise) and record who did."""
    slug, before = profile.slug, _values_of(profile)
    with transaction.atomic():
        profile.delete()
        _audit_change(actor=actor, change="deleted", slug=slug, before=before, after=None)


# What a profile.changed entry records by value: what decides where the workers send a credential
# and how answers are read. Every other changed field is named only (the entry holds no floats).
# The credential itself is never read here: credential_env is the variable's name.
AUDITED_VALUES = (
    "slug",
    "account",
    "status_url",
    "cancel_method",
    "cancel_url",
    "console_url",
    "credential_env",
    "auth_scheme",
    "request_id_header",
    "state_field",
    *(f"{key}_states" for key in STATE_KEYS),
    "approval_mode",
    "escalation_policy",
)


def _values_of(profile: ProviderProfile) -> dict[str, object]:
    return {name: getattr(profile, name) for name in FIELD_TO_KEY}


def _audit_change(
    *,
    actor: Mapping[str, str],
    change: str,
    slug: str,
    before: Mapping[str, object] | None,
    after: Mapping[str, object] | None,
) -> None:
    names = list(FIELD_TO_KEY)
    if before is not None and after is not None:
        names = [name for name in names if before[name] != after[name]]

    def recorded(values: Mapping[str, object] | None) -> dict[str, object] | None:
        if values is None:
            return None
        return {name: values[name] for name in AUDITED_VALUES if name in names}

    audit.append(
        entry_type="profile.changed",
        actor=actor,
        operation_id=None,
        data={"slug": slug, "change": change, "fields": names, "before": recorded(before), "after": recorded(after)},
    )
