"""Dashboard roles, and roles from the identity provider's group claim.

Roles are Django groups `viewer` (reads) and `responder` (decides); admins are superusers with
staff access (docs/DESIGN.md section 7; escalations/roles.py checks them on every request). With a
group claim configured (OIDC_GROUPS_CLAIM), the provider is the source of truth for each role that
has provider groups mapped to it (OIDC_VIEWER_GROUPS, OIDC_RESPONDER_GROUPS, OIDC_ADMIN_GROUPS):
every sign-in grants or takes it away to match the claim. A role with no groups mapped is left as
the admin set it. The changes are recorded by operations/people.py, naming the provider as actor.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from django.contrib.auth.models import Group, User

from operations.responders import RESPONDER, VIEWER

ADMIN = "admin"
GROUP_ROLES = (VIEWER, RESPONDER)


@dataclass(frozen=True)
class RoleMapping:
    """Provider group names -> role, from the OIDC_*_GROUPS settings."""

    viewer_groups: frozenset[str]
    responder_groups: frozenset[str]
    admin_groups: frozenset[str]

    @property
    def managed(self) -> frozenset[str]:
        """The roles the provider decides: those with at least one group mapped to them."""
        pairs = ((VIEWER, self.viewer_groups), (RESPONDER, self.responder_groups), (ADMIN, self.admin_groups))
        return frozenset(role for role, groups in pairs if groups)


def groups_from_claim(value: object) -> frozenset[str]:
    """A group claim as a set of names: a list of strings (Keycloak, Okta, Entra ID) or one string."""
    if isinstance(value, str):
        return frozenset({value})
    if isinstance(value, Iterable) and not isinstance(value, Mapping | bytes):
        return frozenset(item for item in value if isinstance(item, str))
    return frozenset()


def roles_for(groups: frozenset[str], mapping: RoleMapping) -> frozenset[str]:
    """The roles the provider's groups give. Admins and responders also read."""
    roles: set[str] = set()
    if groups & mapping.admin_groups:
        roles |= {ADMIN, RESPONDER, VIEWER}
    if groups & mapping.responder_groups:
        roles |= {RESPONDER, VIEWER}
    if groups & mapping.viewer_groups:
        roles.add(VIEWER)
    return frozenset(roles)


def current_roles(user: User) -> frozenset[str]:
    names = set(user.groups.filter(name__in=GROUP_ROLES).values_list("name", flat=True))
    if getattr(user, "is_superuser", False):
        names.add(ADMIN)
    return frozenset(names)


def sync_roles(*, user: User, wanted: frozenset[str], managed: frozenset[str]) -> None:
    """Grant and take away the managed roles to match `wanted`. Run it inside `people.one_change` (and
    a transaction): that records the changes, naming who made them."""
    have = current_roles(user)
    for role in sorted(managed & (wanted ^ have)):
        grant = role in wanted
        if role == ADMIN:
            user.is_superuser = user.is_staff = grant
            user.save(update_fields=["is_superuser", "is_staff"])
            continue
        group, _ = Group.objects.get_or_create(name=role)
        if grant:
            user.groups.add(group)
        else:
            user.groups.remove(group)
