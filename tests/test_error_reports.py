"""The DEBUG error page shows no webhook URL, DSN, routing key or token, as setting or as variable."""

from __future__ import annotations

import secrets
import sys

from django.test import RequestFactory
from django.views.debug import technical_500_response


def fail_while_posting(webhook_url: str, token: str) -> None:
    raise RuntimeError("the chat service answered 500")


def debug_page(request: object) -> str:
    """The page a failure in code holding the webhook URL and a token renders under DEBUG."""
    from django.conf import settings

    try:
        fail_while_posting(settings.NOTIFY_WEBHOOK_URL, request.headers["Authorization"])
    except RuntimeError:
        return technical_500_response(request, *sys.exc_info()).content.decode()
    raise AssertionError("no failure")


def test_the_debug_page_hides_webhook_urls_dsns_and_routing_keys(settings) -> None:
    # Drawn at run time: the page quotes this file's source lines, which must not hold them.
    hidden = {name: secrets.token_hex(12) for name in ("webhook", "routing", "dsn", "database", "token")}
    settings.DEBUG = True
    settings.NOTIFY_WEBHOOK_URL = f"https://hooks.slack.example/services/T000/{hidden['webhook']}"
    settings.NOTIFY_PAGERDUTY_ROUTING_KEY = hidden["routing"]
    settings.SENTRY_DSN = f"https://{hidden['dsn']}@errors.example/42"
    settings.DATABASE_URL = f"postgres://pollerdash:{hidden['database']}@db.internal/pollerdash"
    request = RequestFactory().get(
        "/operations/",
        HTTP_AUTHORIZATION=f"Bearer {hidden['token']}",
        NOTIFY_WEBHOOK_URL=settings.NOTIFY_WEBHOOK_URL,  # runserver puts the environment in META
    )
    page = debug_page(request)
    assert "the chat service answered 500" in page and "fail_while_posting" in page
    leaked = [name for name, value in hidden.items() if value in page]
    assert not leaked
    assert "NOTIFY_WEBHOOK_URL" in page  # the name stays, so a reader knows it is set
