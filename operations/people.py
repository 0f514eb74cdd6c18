"""Audit entries for the people who may decide: accounts created, renamed, given or stripped of a
role, deactivated, reactivated or deleted.

Roles are Django groups plus the staff and superuser flags (escalations/roles.py), so any change
to those, or to a username the history shows, goes into the audit chain with who made it:

- `user_change_record(before=, after=, actor=)` is the service: it compares two `UserFacts` and
  appends one entry per kind of change. Code that changes people on someone's behalf (the admin;
  a single sign-on, accounts/oidc.py, with the provider as actor) calls it, or makes its changes inside
  `one_change(actor)` (one entry per kind of change when the block ends) or `acting_as(actor)`.
- Signal receivers (`connect`, called from EscalationsConfig.ready) catch every change made
  through the ORM — saves, group membership from either side (m2m_changed), deletions, a role
  group renamed or deleted — so no path is missed; the actor is whoever `one_change` or
  `acting_as` names, or `UNATTRIBUTED` (the shell, createsuperuser).
- `AttributedUserAdmin` / `AttributedGroupAdmin` run their views as the signed-in admin.

Entries carry usernames, group names and flags, never a password hash or an email address.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from dataclasses import dataclass, field

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group, User
from django.db import transaction
from django.db.models.signals import m2m_changed, post_delete, post_save, pre_delete, pre_save

from operations.audit import entries as audit

UNATTRIBUTED = {"kind": "system", "id": "unattributed"}
# The fields whose change is recorded; a save that touches none of them (a login's last_login)
# costs no query.
TRACKED_FIELDS = frozenset({"username", "is_active", "is_staff", "is_superuser"})
_actor: ContextVar[Mapping[str, str] | None] = ContextVar("pollerdash_user_change_actor", default=None)


@dataclass(frozen=True)
class UserFacts:
    user_id: int
    username: str
    is_active: bool
    is_staff: bool
    is_superuser: bool
    groups: tuple[str, ...]

    @property
    def roles(self) -> dict[str, object]:
        return {"groups": list(self.groups), "is_staff": self.is_staff, "is_superuser": self.is_superuser}


def user_facts(user: User, *, groups: tuple[str, ...] | None = None) -> UserFacts:
    """What the audit compares, as the object holds it now (groups read from the database)."""
    if groups is None:
        groups = tuple(sorted(user.groups.values_list("name", flat=True)))
    return UserFacts(
        user_id=user.pk,
        username=user.get_username(),
        is_active=bool(user.is_active),
        is_staff=bool(user.is_staff),
        is_superuser=bool(user.is_superuser),
        groups=groups,
    )


@dataclass
class _Pending:
    """People changed inside `one_change`, with their facts before the first change."""

    actor: Mapping[str, str]
    before: dict[int, UserFacts | None] = field(default_factory=dict)


_pending: ContextVar[_Pending | None] = ContextVar("pollerdash_user_changes_pending", default=None)


@contextlib.contextmanager
def acting_as(actor: Mapping[str, str]) -> Iterator[None]:
    """User changes made inside are recorded as made by `actor` (an audit actor), each as it happens."""
    token = _actor.set(actor)
    try:
        yield
    finally:
        _actor.reset(token)


@contextlib.contextmanager
def one_change(actor: Mapping[str, str]) -> Iterator[None]:
    """User changes made inside are recorded as made by `actor` when the block ends, one entry per
    kind of change and person (a form that renames someone and replaces their groups is one
    rename and one role change, not a remove and an add). Run it inside the transaction that
    makes the changes, so they and their entries commit together; `record_pending` records
    earlier, for callers that leave the transaction before the block ends (the admin)."""
    pending = _Pending(actor=actor)
    tokens = (_actor.set(actor), _pending.set(pending))
    try:
        yield
    finally:
        _actor.reset(tokens[0])
        _pending.reset(tokens[1])
    _record(pending)


def record_pending() -> None:
    pending = _pending.get()
    if pending is not None:
        _record(pending)


def _record(pending: _Pending) -> None:
    befores, pending.before = pending.before, {}
    users = get_user_model().objects.in_bulk(list(befores))
    for user_id, before in befores.items():
        user = users.get(user_id)
        user_change_record(before=before, after=None if user is None else user_facts(user), actor=pending.actor)


def current_actor() -> Mapping[str, str]:
    return _actor.get() or UNATTRIBUTED


def _changed(user_id: int, before: UserFacts | None) -> None:
    """A receiver saw a change: record it now, or note it for the surrounding `one_change`."""
    pending = _pending.get()
    if pending is not None:
        pending.before.setdefault(user_id, before)
        return
    user = get_user_model().objects.filter(pk=user_id).first()
    user_change_record(before=before, after=None if user is None else user_facts(user), actor=current_actor())


def user_change_record(*, before: UserFacts | None, after: UserFacts | None, actor: Mapping[str, str]) -> int:
    """Append an entry for each kind of change from `before` to `after` (None: the account did not
    exist / no longer exists); returns how many. Joins the caller's transaction when there is one."""
    entries: list[tuple[str, dict[str, object]]] = []
    if before is None and after is not None:
        entries.append(
            (
                "user.created",
                {"user_id": after.user_id, "username": after.username, "is_active": after.is_active, **after.roles},
            )
        )
    elif before is not None and after is None:
        entries.append(("user.deleted", {"user_id": before.user_id, "username": before.username, **before.roles}))
    elif before is not None and after is not None:
        who = {"user_id": after.user_id, "username": after.username}
        if before.username != after.username:
            entries.append(("user.renamed", {**who, "old_username": before.username}))
        if before.roles != after.roles:
            entries.append(("user.roles_changed", {**who, "before": before.roles, "after": after.roles}))
        if before.is_active != after.is_active:
            entries.append(("user.deactivated" if before.is_active else "user.reactivated", who))
    if not entries:
        return 0
    with transaction.atomic():
        for entry_type, data in entries:
            audit.append(entry_type=entry_type, actor=actor, operation_id=None, data=data)
    return len(entries)


# --- signal receivers ---------------------------------------------------------------------------------


def _before_save(
    sender: type[User], instance: User, raw: bool = False, update_fields: object = None, **_: object
) -> None:
    instance._pollerdash_before = None  # type: ignore[attr-defined]  # kept on the instance until the post_ signal
    if raw or instance.pk is None:
        return
    # update_fields is an iterable of names whenever it is not None.
    if update_fields is not None and not TRACKED_FIELDS & set(update_fields):  # type: ignore[call-overload]
        return
    stored = sender.objects.filter(pk=instance.pk).first()
    instance._pollerdash_before = None if stored is None else user_facts(stored)  # type: ignore[attr-defined]  # kept on the instance until the post_ signal


def _after_save(sender: type[User], instance: User, created: bool, raw: bool = False, **_: object) -> None:
    if raw:
        return
    before = getattr(instance, "_pollerdash_before", None)
    instance._pollerdash_before = None  # type: ignore[attr-defined]  # kept on the instance until the post_ signal
    if created or before is not None:
        _changed(instance.pk, before)


def _members(group: Group) -> list[UserFacts]:
    return [user_facts(user) for user in get_user_model().objects.filter(groups=group)]


def _groups_changed(
    sender: type, instance: object, action: str, reverse: bool, pk_set: set[int] | None, **_: object
) -> None:
    if action.startswith("pre_"):
        if not reverse:
            # m2m_changed: the instance is a User when sent from the user's side, else a Group.
            befores = [user_facts(instance)]  # type: ignore[arg-type]  # User from the user side, else Group
        elif pk_set is None:  # group.user_set.clear(): everyone in the group
            befores = _members(instance)  # type: ignore[arg-type]  # User from the user side, else Group
        else:
            befores = [user_facts(user) for user in get_user_model().objects.filter(pk__in=pk_set)]
        instance._pollerdash_members_before = befores  # type: ignore[attr-defined]  # kept on the instance until the post_ signal
        return
    _members_changed(instance)


def _members_changed(instance: object) -> None:
    befores = getattr(instance, "_pollerdash_members_before", None) or []
    instance._pollerdash_members_before = None  # type: ignore[attr-defined]  # kept on the instance until the post_ signal
    for before in befores:
        _changed(before.user_id, before)


def _before_user_delete(sender: type[User], instance: User, **_: object) -> None:
    instance._pollerdash_deleted = user_facts(instance)  # type: ignore[attr-defined]  # kept on the instance until the post_ signal


def _after_user_delete(sender: type[User], instance: User, **_: object) -> None:
    before = getattr(instance, "_pollerdash_deleted", None)
    if before is not None:
        _changed(before.user_id, before)


def _before_group_save(sender: type, instance: Group, raw: bool = False, **_: object) -> None:
    # Roles are group names: renaming a group changes the roles of everyone in it.
    instance._pollerdash_members_before = None  # type: ignore[attr-defined]  # kept on the instance until the post_ signal
    if raw or instance.pk is None:
        return
    if Group.objects.filter(pk=instance.pk).exclude(name=instance.name).exists():
        instance._pollerdash_members_before = _members(instance)  # type: ignore[attr-defined]  # kept on the instance until the post_ signal


def _after_group_save(sender: type, instance: Group, raw: bool = False, **_: object) -> None:
    if not raw:
        _members_changed(instance)


def _before_group_delete(sender: type, instance: Group, **_: object) -> None:
    instance._pollerdash_members_before = _members(instance)  # type: ignore[attr-defined]  # kept on the instance until the post_ signal


def _after_group_delete(sender: type, instance: Group, **_: object) -> None:
    _members_changed(instance)


def connect() -> None:
    user_model = get_user_model()
    uid = "pollerdash.user_audit"
    pre_save.connect(_before_save, sender=user_model, dispatch_uid=f"{uid}.pre_save")
    post_save.connect(_after_save, sender=user_model, dispatch_uid=f"{uid}.post_save")
    m2m_changed.connect(_groups_changed, sender=user_model.groups.through, dispatch_uid=f"{uid}.groups")
    pre_delete.connect(_before_user_delete, sender=user_model, dispatch_uid=f"{uid}.pre_delete")
    post_delete.connect(_after_user_delete, sender=user_model, dispatch_uid=f"{uid}.post_delete")
    pre_save.connect(_before_group_save, sender=Group, dispatch_uid=f"{uid}.group_pre_save")
    post_save.connect(_after_group_save, sender=Group, dispatch_uid=f"{uid}.group_post_save")
    pre_delete.connect(_before_group_delete, sender=Group, dispatch_uid=f"{uid}.group_pre_delete")
    post_delete.connect(_after_group_delete, sender=Group, dispatch_uid=f"{uid}.group_post_delete")
