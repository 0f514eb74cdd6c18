"""The OP's own pages: the control endpoint that creates test users, and max_age on /authorize."""

from __future__ import annotations

import json
import time
from urllib.parse import urlencode

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.views import redirect_to_login
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils.crypto import constant_time_compare
from django.views.decorators.csrf import csrf_exempt
from django.views.decorators.http import require_POST
from oauth2_provider.views import AuthorizationView

from tests.oidc_provider import state


@csrf_exempt
@require_POST
def put_user(request: HttpRequest) -> HttpResponse:
    """POST /testop/users {"username", "password", "groups", "tamper", "email", "name", "sub",
    "preferred_username", "email_verified"}."""
    token = request.headers.get("Authorization", "").removeprefix("Bearer ")
    if not constant_time_compare(token, settings.CONTROL_TOKEN):
        return JsonResponse({"error": "control token required"}, status=403)
    try:
        body = json.loads(request.body)
        username = str(body["username"])
    except (ValueError, KeyError, TypeError):
        return JsonResponse({"error": "body must be JSON with a username"}, status=400)
    tamper = str(body.get("tamper", ""))
    if tamper not in state.TAMPER_MODES:
        return JsonResponse({"error": f"tamper must be one of {sorted(state.TAMPER_MODES)}"}, status=400)
    user, _ = get_user_model().objects.get_or_create(username=username)
    user.set_password(str(body.get("password", "pw-" + username)))
    user.save()
    state.put(
        state.TestUser(
            username=username,
            email=str(body.get("email", f"{username}@example.test")),
            name=str(body.get("name", username.title())),
            groups=[str(g) for g in body.get("groups", [])],
            tamper=tamper,
            sub=str(body.get("sub", "")),
            preferred_username=str(body.get("preferred_username", "")),
            email_verified=body.get("email_verified", True),
        )
    )
    return JsonResponse({"username": username})


class MaxAgeAuthorizationView(AuthorizationView):
    """django-oauth-toolkit honours prompt=login but not max_age: an older sign-in means signing in again."""

    def get(self, request: HttpRequest, *args: object, **kwargs: object) -> HttpResponse:
        max_age = request.GET.get("max_age", "")
        if request.user.is_authenticated:
            state.asked_max_age(request.user.get_username(), asked=bool(max_age))
        last_login = getattr(request.user, "last_login", None)
        if max_age.isdigit() and last_login is not None and time.time() - last_login.timestamp() > int(max_age):
            return redirect_to_login(request.get_full_path(), settings.LOGIN_URL)
        return super().get(request, *args, **kwargs)


def home(request: HttpRequest) -> HttpResponse:
    query = urlencode({"issuer": settings.ISSUER})
    return HttpResponse(f"test OpenID Provider ({query})", content_type="text/plain")
