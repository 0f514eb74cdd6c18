from __future__ import annotations

from django.urls import path

from escalations import views

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("cards/<int:escalation_id>/", views.card, name="escalation_card"),
    path("cards/<int:escalation_id>/decide/", views.decide, name="escalation_decide"),
    path("cards/<int:escalation_id>/assign/", views.assign, name="escalation_assign"),
    path("history/", views.history, name="decision_history"),
    path("history/decisions.csv", views.history_csv, name="decision_history_csv"),
    path("history/audit.jsonl", views.history_jsonl, name="decision_history_jsonl"),
    path("history/report/", views.history_report, name="decision_history_report"),
]
