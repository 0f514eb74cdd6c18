from __future__ import annotations

from django.urls import path

from operations import views, views_system

urlpatterns = [
    path("operations/", views.operation_list, name="operation_list"),
    path("operations/<str:operation_id>/", views.operation_detail, name="operation_detail"),
    path("operations/<str:operation_id>/audit.jsonl", views.operation_audit_jsonl, name="operation_audit_jsonl"),
    path("operations/<str:operation_id>/checks.csv", views.operation_checks_csv, name="operation_checks_csv"),
    path("operations/<str:operation_id>/decisions.csv", views.operation_decisions_csv, name="operation_decisions_csv"),
    path("operations/<str:operation_id>/report/", views.operation_report, name="operation_report"),
    path("system/", views_system.system, name="system"),
]
