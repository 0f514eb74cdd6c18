"""Admin views of cards and decisions: read-only. Decisions are taken on the dashboard, never here,
so every one goes through the version check, the bounds and the audit chain."""

from __future__ import annotations

from django.contrib import admin

from escalations.models import Decision, Escalation
from operations.admin import ViewOnlyAdmin


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
    list_display = ("id", "decided_at", "user", "operation", "option", "outcome", "card_version")
    list_filter = ("outcome", "decided_at")
    search_fields = ("operation__id", "option", "comment", "user__username")
    list_select_related = ("user", "operation")
