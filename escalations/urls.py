"""The dashboard's URLs: the inbox and cards, history, operations, the system panel."""

from __future__ import annotations

from django.urls import path

from escalations.views import cards, groups, history, operations, system

urlpatterns = [
    path("", cards.inbox, name="inbox"),
    path("cards/<int:escalation_id>/", cards.card, name="escalation_card"),
    path("cards/<int:escalation_id>/decide/", cards.decide, name="escalation_decide"),
    path("cards/<int:escalation_id>/acknowledge/", cards.acknowledge, name="escalation_acknowledge"),
    path("cards/<int:escalation_id>/unacknowledge/", cards.unacknowledge, name="escalation_unacknowledge"),
    path("cards/<int:escalation_id>/reassign/", cards.reassign, name="escalation_reassign"),
    path("cards/<int:escalation_id>/notes/", cards.add_note, name="escalation_note"),
    path("cards/<int:escalation_id>/snooze/", cards.snooze, name="escalation_snooze"),
    # The former "Take this card" / "Give it back": acknowledge / unacknowledge (kept for old links).
    path("cards/<int:escalation_id>/assign/", cards.assign, name="escalation_assign"),
    path("groups/<int:group_id>/", groups.group, name="card_group"),
    path("groups/<int:group_id>/acknowledge/", groups.group_acknowledge, name="card_group_acknowledge"),
    path("groups/<int:group_id>/bulk/", groups.group_bulk, name="card_group_bulk"),
    path("history/", history.history, name="decision_history"),
    path("history/decisions.csv", history.history_csv, name="decision_history_csv"),
    path("history/audit.jsonl", history.history_jsonl, name="decision_history_jsonl"),
    path("history/card-activity.csv", history.history_activity_csv, name="decision_history_activity_csv"),
    path("history/report/", history.history_report, name="decision_history_report"),
    path("operations/", operations.operation_list, name="operation_list"),
    path("operations/<str:operation_id>/", operations.operation_detail, name="operation_detail"),
    path("operations/<str:operation_id>/audit.jsonl", operations.operation_audit_jsonl, name="operation_audit_jsonl"),
    path("operations/<str:operation_id>/checks.csv", operations.operation_checks_csv, name="operation_checks_csv"),
    path(
        "operations/<str:operation_id>/decisions.csv",
        operations.operation_decisions_csv,
        name="operation_decisions_csv",
    ),
    path(
        "operations/<str:operation_id>/card-activity.csv",
        operations.operation_activity_csv,
        name="operation_activity_csv",
    ),
    path("operations/<str:operation_id>/report/", operations.operation_report, name="operation_report"),
    path("system/", system.system, name="system"),
]
