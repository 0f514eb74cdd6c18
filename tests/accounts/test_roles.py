"""Roles from an identity provider's group claim (pure rules)."""

from __future__ import annotations

from accounts.roles import ADMIN, RESPONDER, VIEWER, RoleMapping, groups_from_claim, roles_for

MAPPING = RoleMapping(
    viewer_groups=frozenset({"watchers"}),
    responder_groups=frozenset({"oncall", "sre"}),
    admin_groups=frozenset({"pd-admins"}),
)


def test_a_group_claim_is_a_list_or_a_single_name_and_nothing_else():
    assert groups_from_claim(["oncall", "marketing", 7, None]) == {"oncall", "marketing"}
    assert groups_from_claim("oncall") == {"oncall"}
    assert groups_from_claim({"oncall": True}) == frozenset()
    assert groups_from_claim(None) == frozenset()


def test_groups_map_to_roles_and_higher_roles_also_read():
    assert roles_for(frozenset({"sre"}), MAPPING) == {RESPONDER, VIEWER}
    assert roles_for(frozenset({"watchers"}), MAPPING) == {VIEWER}
    assert roles_for(frozenset({"pd-admins"}), MAPPING) == {ADMIN, RESPONDER, VIEWER}
    assert roles_for(frozenset({"marketing"}), MAPPING) == frozenset()
    # Group names are compared exactly: a provider's "OnCall" is another group.
    assert roles_for(frozenset({"OnCall"}), MAPPING) == frozenset()


def test_only_roles_with_groups_mapped_are_managed_by_the_provider():
    assert MAPPING.managed == {VIEWER, RESPONDER, ADMIN}
    partial = RoleMapping(viewer_groups=frozenset(), responder_groups=frozenset({"oncall"}), admin_groups=frozenset())
    assert partial.managed == {RESPONDER}
