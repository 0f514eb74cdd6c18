from __future__ import annotations

from django.urls import path

from operations import views

urlpatterns = [
    path("operations/", views.operation_list, name="operation_list"),
    path("operations/<str:operation_id>/", views.operation_detail, name="operation_detail"),
]
