from __future__ import annotations

from django.contrib.auth import views as auth_views
from django.urls import include, path

from tests.oidc_provider import views

urlpatterns = [
    path("", views.home),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("testop/users", views.put_user),
    # Ours first: /o/authorize/ with max_age; everything else is django-oauth-toolkit's.
    path("o/authorize/", views.MaxAgeAuthorizationView.as_view()),
    path("o/", include("oauth2_provider.urls", namespace="oauth2_provider")),
]
