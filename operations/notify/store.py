"""Escalation policies stored: the one write service, the TOML loader, and which policy a card follows.

`loadpolicies` and the admin form both go through `policies_save`, which validates every policy
whole (operations.notify.policy.validate_policy, against the users and groups that exist now)
before writing anything, and records each change as a `policy.changed` audit entry.

Which policy a card follows, in order: its profile's `escalation_policy`; ESCALATION_DEFAULT_POLICY;
the policy marked default in the admin; else the implicit "settings" policy built from NOTIFY_EMAILS
and NOTIFY_WEBHOOK_URL (one level, repeated every NOTIFY_REMINDER_S, ten times), so deployments
configured before policies existed keep being told; none when none of these names anyone.
"""

from __future__ import annotations

import json
import logging
import tomllib
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.db import transaction

from operations.audit import entries as audit
from operations.models import EscalationPolicy, PolicyLevel, PolicyTarget, ProviderProfile
from operations.notify.kinds import TARGETS, Kind, Ref
from operations.notify.policy import (
    WAIT_RANGE_S,
    Directory,
    Level,
    Policy,
    Target,
    validate_policy,
)

logger = logging.getLogger(__name__)

# The implicit policy's name, and the variable its chat target reads (through settings, which also
# accepts NOTIFY_WEBHOOK_URL_FILE): the one env name a policy may hold without the ONCALL_ prefix.
SETTINGS_POLICY = "settings"
LEGACY_WEBHOOK_ENV = "NOTIFY_WEBHOOK_URL"
SETTINGS_POLICY_REPEATS = 10


class PoliciesInvalid(Exception):
    """A policies file or form was refused whole; `problems` names every reason."""

    def __init__(self, problems: Sequence[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = tuple(problems)


@dataclass(frozen=True)
class SaveResult:
    name: str
    change: str  # "created" | "updated" | "unchanged"


def directory() -> Directory:
    """What policy targets may name right now."""
    return Directory(
        usernames=frozenset(get_user_model().objects.values_list("username", flat=True)),
        groups=frozenset(Group.objects.values_list("name", flat=True)),
        slack_app_configured=bool(settings.SLACK_BOT_TOKEN),
    )


def validate_all(raws: Sequence[object], *, label: str = "policy") -> list[Policy]:
    """Every policy valid, or PoliciesInvalid naming each problem as `<label> #n (name): key: message`."""
    known = directory()
    problems: list[str] = []
    policies: list[Policy] = []
    seen: dict[str, int] = {}
    for index, raw in enumerate(raws, start=1):
        name = raw.get("name") if isinstance(raw, Mapping) else None
        where = f"{label} #{index}" + (f" ({name})" if isinstance(name, str) and len(name) <= 100 else "")
        result = validate_policy(raw, directory=known)
        if isinstance(result, list):
            problems += [f"{where}: {problem}" for problem in result]
            continue
        if result.name in seen:
            problems.append(f"{where}: name: duplicate of {label} #{seen[result.name]}")
            continue
        seen[result.name] = index
        policies.append(result)
    if problems:
        raise PoliciesInvalid(problems)
    return policies


def load_policies_file(*, path: Path) -> list[Policy]:
    """Read and validate a TOML file of [[policy]] tables; PoliciesInvalid lists every problem."""
    try:
        with path.open("rb") as handle:
            document = tomllib.load(handle)
    except OSError as exc:
        raise PoliciesInvalid([f"{path}: cannot read: {exc.strerror or exc}"]) from exc
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise PoliciesInvalid([f"{path}: not valid TOML: {exc}"]) from exc
    problems = [
        f"unknown top-level key {key!r} (a policies file holds only [[policy]] tables)"
        for key in document
        if key != "policy"
    ]
    entries = document.get("policy")
    if not isinstance(entries, list) or not entries:
        problems.append("no [[policy]] tables")
        entries = []
    try:
        policies = validate_all(entries)
    except PoliciesInvalid as exc:
        problems += exc.problems
    if problems:
        raise PoliciesInvalid(problems)
    return policies


def policies_save(
    *,
    policies: Sequence[Policy],
    actor: Mapping[str, str],
    descriptions: Mapping[str, str] | None = None,
    default: bool | None = None,
) -> list[SaveResult]:
    """Create or replace policies by name in one transaction (levels and targets written anew).

    `default`: True makes the (one) policy given the default for profiles that name none, False
    makes it not the default, None leaves the marks as they are.
    """
    if default and len(policies) != 1:
        raise ValueError("policies_save: only one policy can be made the default")
    results: list[SaveResult] = []
    users = {u.get_username(): u for u in get_user_model().objects.all()}
    groups = {g.name: g for g in Group.objects.all()}
    with transaction.atomic():
        existing = {
            p.name: p for p in EscalationPolicy.objects.select_for_update().filter(name__in=[p.name for p in policies])
        }
        if default:
            EscalationPolicy.objects.filter(is_default=True).exclude(name=policies[0].name).update(is_default=False)
        for policy in policies:
            row = existing.get(policy.name)
            description = (descriptions or {}).get(policy.name, row.description if row else "")
            is_default = default if default is not None else bool(row and row.is_default)
            if row is not None and (policy_of(row), row.description, row.is_default) == (
                policy,
                description,
                is_default,
            ):
                results.append(SaveResult(policy.name, "unchanged"))
                continue
            change = "created" if row is None else "updated"
            if row is None:
                row = EscalationPolicy(name=policy.name)
            row.description, row.repeat_last_level, row.is_default = description, policy.repeat_last_level, is_default
            row.ack_timeout_s = policy.ack_timeout_s
            row.save()
            row.levels.all().delete()
            for order, level in enumerate(policy.levels):
                level_row = PolicyLevel.objects.create(policy=row, order=order, wait_s=level.wait_s)
                PolicyTarget.objects.bulk_create(
                    _target_row(level_row, position, target, users=users, groups=groups)
                    for position, target in enumerate(level.targets)
                )
            _audit(actor=actor, name=policy.name, change=change, policy=policy, is_default=is_default)
            results.append(SaveResult(policy.name, change))
    return results


def policy_delete(*, row: EscalationPolicy, actor: Mapping[str, str]) -> None:
    """Delete a policy no profile names (PoliciesInvalid otherwise: edit those profiles first)."""
    with transaction.atomic():
        named_by = sorted(ProviderProfile.objects.filter(escalation_policy=row.name).values_list("slug", flat=True))
        if named_by:
            raise PoliciesInvalid([f"{row.name} is named by profile(s) {', '.join(named_by)}: change them first"])
        _audit(actor=actor, name=row.name, change="deleted", policy=None, is_default=row.is_default)
        row.delete()


def _target_row(
    level: PolicyLevel, position: int, target: Target, *, users: Mapping[str, User], groups: Mapping[str, Group]
) -> PolicyTarget:
    """The row of a target: its value in the column its kind's value names (operations.notify.kinds.Ref)."""
    row = PolicyTarget(level=level, position=position, kind=str(target.kind))
    ref = TARGETS[target.kind]
    value: object = users[target.ref] if ref is Ref.USER else groups[target.ref] if ref is Ref.GROUP else target.ref
    setattr(row, str(ref), value)
    return row


def _audit(*, actor: Mapping[str, str], name: str, change: str, policy: Policy | None, is_default: bool) -> None:
    audit.append(
        entry_type="policy.changed",
        actor=actor,
        operation_id=None,
        data={
            "name": name,
            "change": change,
            "policy": None if policy is None else policy.to_json(),
            "is_default": is_default,
        },
    )


# --- reading ---------------------------------------------------------------------------------------


def policy_of(row: EscalationPolicy) -> Policy:
    """A stored policy as the pure code sees it (targets by username, group name, address or env name)."""
    levels = (
        PolicyLevel.objects.filter(policy=row).order_by("order").prefetch_related("targets__user", "targets__group")
    )
    return Policy(
        name=row.name,
        repeat_last_level=row.repeat_last_level,
        ack_timeout_s=row.ack_timeout_s,
        levels=tuple(
            Level(
                wait_s=level.wait_s,
                targets=tuple(
                    Target(kind=Kind(t.kind), ref=t.ref) for t in sorted(level.targets.all(), key=lambda t: t.position)
                ),
            )
            for level in levels
        ),
    )


def levels_toml(policy: Policy) -> str:
    """The levels as the admin form edits them: [[levels]] tables, targets one-key inline tables."""
    blocks = []
    for level in policy.levels:
        targets = ", ".join(f"{{ {t.kind} = {json.dumps(t.ref)} }}" for t in level.targets)
        blocks.append(f"[[levels]]\nwait_s = {level.wait_s}\ntargets = [{targets}]")
    return "\n\n".join(blocks) + ("\n" if blocks else "")


def missing_policies(*, names: set[str]) -> set[str]:
    """Which of `names` no stored policy has."""
    if not names:
        return set()
    return names - set(EscalationPolicy.objects.filter(name__in=names).values_list("name", flat=True))


def settings_policy() -> Policy | None:
    """The implicit policy of deployments configured with NOTIFY_EMAILS / NOTIFY_WEBHOOK_URL only."""
    targets = [Target(Kind.EMAIL, address) for address in dict.fromkeys(settings.NOTIFY_EMAILS)]
    if settings.NOTIFY_WEBHOOK_URL:
        targets.append(Target(Kind.SLACK_WEBHOOK, LEGACY_WEBHOOK_ENV))
    if not targets:
        return None
    reminder_s = settings.NOTIFY_REMINDER_S
    # NOTIFY_REMINDER_S <= 0 meant "no reminders": one message, then the run ends after a day.
    wait = min(max(reminder_s, WAIT_RANGE_S[0]), WAIT_RANGE_S[1]) if reminder_s > 0 else WAIT_RANGE_S[1]
    repeats = SETTINGS_POLICY_REPEATS if reminder_s > 0 else 0
    return Policy(name=SETTINGS_POLICY, levels=(Level(wait_s=wait, targets=tuple(targets)),), repeat_last_level=repeats)


def policy_for(*, profile: ProviderProfile) -> Policy | None:
    """The policy a new card of this profile follows (module docstring), or None: nobody is told."""
    for name, why in (
        (profile.escalation_policy, f"profile {profile.slug}"),
        (settings.ESCALATION_DEFAULT_POLICY, "ESCALATION_DEFAULT_POLICY"),
    ):
        if not name:
            continue
        row = EscalationPolicy.objects.filter(name=name).first()
        if row is not None:
            return policy_of(row)
        logger.warning("escalation policy %r (named by %s) does not exist; using the default", name, why)
    row = EscalationPolicy.objects.filter(is_default=True).first()
    if row is not None:
        return policy_of(row)
    return settings_policy()
