from __future__ import annotations

from django.urls import path

from escalations import views

urlpatterns = [
    path("", views.inbox, name="inbox"),
]
