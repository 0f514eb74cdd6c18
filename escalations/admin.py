"""Admin views of cards and decisions: read-only. Decisions are taken on the dashboard, never here,
so every one goes through the version check, the bounds and the audit chain."""

from __future__ import annotations

from django.contrib import admin
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group

from escalations.models import Decision, Escalation
from escalations.user_audit import AttributedGroupAdmin, AttributedUserAdmin
from operations.admin import ViewOnlyAdmin

# Users and groups are edited as django.contrib.auth lays them out; every change is written to the
# audit chain naming the admin who made it (escalations/user_audit.py).
admin.site.unregister(get_user_model())
admin.site.register(get_user_model(), AttributedUserAdmin)
admin.site.unregister(Group)
admin.site.register(Group, AttributedGroupAdmin)


@admin.register(Escalation)
class EscalationAdmin(ViewOnlyAdmin):
    # The credential fingerprint is an HMAC, not the secret, but it has no use for a reader.
    hidden_fields = ("credential_fingerprint",)
    list_display = ("id", "operation", "reason", "state", "version", "opened_at", "closed_at", "assignee")
    list_filter = ("state", "reason")
    search_fields = ("operation__id", "detail")
    list_select_related = ("operation", "assignee")


@admin.register(Decision)
class DecisionAdmin(ViewOnlyAdmin):
    list_display = ("id", "decided_at", "username", "user", "operation", "option", "outcome", "card_version")
    list_filter = ("outcome", "decided_at")
    search_fields = ("operation__id", "option", "comment", "username")
    list_select_related = ("user", "operation")
