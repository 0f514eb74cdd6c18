"""What Django's error reports (the DEBUG page, error emails) may show of settings and variables.

Django hides settings whose names contain API, AUTH, TOKEN, KEY, SECRET, PASS or SIGNATURE. Here
webhook URLs (NOTIFY_WEBHOOK_URL, Slack hooks carry their secret in the path), routing keys,
DSNs, connection URLs (DATABASE_URL holds the password) and provider credentials are secrets too.
The same names are hidden in request.META (which holds the environment under runserver) and in
the local variables of every traceback frame, whatever DEBUG says: a frame of `post_webhook`
would otherwise print the webhook URL in clear.
"""

from __future__ import annotations

import re

from django.http import HttpRequest
from django.utils.regex_helper import _lazy_re_compile
from django.views import debug

HIDDEN_NAMES = "API|AUTH|TOKEN|KEY|SECRET|PASS|SIGNATURE|HTTP_COOKIE|URL|WEBHOOK|ROUTING_KEY|DSN|CREDENTIAL|PROVIDER_"


class SafeExceptionReporterFilter(debug.SafeExceptionReporterFilter):
    hidden_settings = _lazy_re_compile(HIDDEN_NAMES, flags=re.IGNORECASE)

    # Django only iterates over the pairs: a list does as well as the ItemsView the stubs declare.
    def get_traceback_frame_variables(  # type: ignore[override]
        self, request: HttpRequest, tb_frame: object
    ) -> list[tuple[str, object]]:
        return [
            (name, self.cleansed_substitute if self.hidden_settings.search(name) else value)
            for name, value in super().get_traceback_frame_variables(request, tb_frame)
        ]
