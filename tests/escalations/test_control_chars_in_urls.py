"""No dashboard, sign-in or API URL answers 5xx for a NUL byte or another control character in a path
segment or a query parameter (review F9): PostgreSQL refuses NUL in text ("A string literal cannot
contain NUL"), so such a value must be refused before a query sees it — 404 for a path, 400 with a
message for a query. The walk covers every URL pattern outside the admin, signed in and with an
agent token, on whichever database the suite runs (run it on SQLite and on PostgreSQL)."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import quote, urlencode

import pytest
from asgiref.sync import async_to_sync
from django.test import Client
from django.urls import URLPattern, URLResolver, get_resolver

from operations.agents.identities import agent_token_issue

pytestmark = pytest.mark.django_db

ROOT = Path(__file__).resolve().parents[2]
BAD = ["\x00", "a\x00b", "\x01", "\x1b[2J", "\x7f"]
_CONVERTER = re.compile(r"<(?:(?P<kind>\w+):)?(?P<name>\w+)>")


def patterns() -> list[str]:
    """Every route outside the admin, as written ("operations/<str:operation_id>/")."""
    found: list[str] = []

    def walk(entries: list, prefix: str) -> None:
        for entry in entries:
            if isinstance(entry, URLResolver):
                walk(entry.url_patterns, prefix + str(entry.pattern))
            elif isinstance(entry, URLPattern):
                found.append(prefix + str(entry.pattern))

    walk(get_resolver().url_patterns, "")
    return sorted({p for p in found if not p.startswith(("admin/", "^admin/")) and "(?P" not in p})


def query_names() -> list[str]:
    """Every query parameter a view or selector reads (found in the source), and the API's."""
    names = {"page", "q", "status", "provider", "limit", "cursor", "timeout_s", "since", "from", "to"}
    for folder in ("escalations", "accounts", "operations"):
        for source in (ROOT / folder).rglob("*.py"):
            text = source.read_text()
            names |= set(re.findall(r"(?:GET|query|params)\.get(?:list)?\(\"([a-z_]+)\"", text))
    return sorted(names)


def fill(pattern: str, *, value: str, real: dict[str, str]) -> str:
    """The pattern with its <str> segments set to `value` (percent-encoded) and its <int> ones to a real id."""

    def one(match: re.Match[str]) -> str:
        if match["kind"] == "int":
            return real.get(match["name"], "1")
        return quote(value, safe="")

    return "/" + _CONVERTER.sub(one, pattern)


def drain(response: object) -> None:
    """Read a streamed answer to its end: an error while streaming counts too."""
    if not getattr(response, "streaming", False):
        return
    content = response.streaming_content
    if hasattr(content, "__aiter__"):

        async def read() -> None:
            async for _ in content:
                pass

        async_to_sync(read)()
    else:
        for _ in content:
            pass


@pytest.fixture
def visitors(stopped, alice, client: Client) -> tuple[dict[str, str], list[tuple[str, Client, dict]]]:
    card = stopped()
    real = {"escalation_id": str(card.pk), "group_id": "1", "operation_id": card.operation_id}
    client.force_login(alice)
    token = agent_token_issue(name="fuzz-bot").token
    agent = ("agent", Client(), {"HTTP_AUTHORIZATION": f"Bearer {token}"})
    return real, [("responder", client, {}), ("anonymous", Client(), {}), agent]


def test_control_characters_in_any_segment_or_query_never_answer_5xx(visitors, settings) -> None:
    settings.EXPORTS_MAX_CONCURRENT = 0  # the walk opens many exports; the cap is not what is tested
    real, who = visitors
    failures: list[str] = []
    walked = 0
    names = query_names()
    assert {"q", "page", "provider", "status", "tab", "tz"} <= set(names)
    queries = [urlencode({name: BAD[1]}) for name in names] + [urlencode(dict.fromkeys(names, v)) for v in BAD]
    for pattern in patterns():
        # Each bad value in each path segment; the query's bad values on the pattern's real addresses.
        requests = [(fill(pattern, value=value, real=real), "") for value in BAD]
        for path in dict.fromkeys(
            [fill(pattern, value="x", real=real), fill(pattern, value=real["operation_id"], real=real)]
        ):
            requests += [(path, query) for query in queries]
        for path, query in dict.fromkeys(requests):
            for label, visitor, headers in who:
                url = f"{path}?{query}" if query else path
                response = visitor.get(url, **headers)
                walked += 1
                try:
                    drain(response)
                except Exception as exc:  # any error while streaming is the finding
                    failures.append(f"{label} GET {url!r}: streaming raised {exc!r}")
                    continue
                if response.status_code >= 500:
                    failures.append(f"{label} GET {url!r}: {response.status_code}")
    assert not failures, "\n".join(failures[:40]) + f"\n({len(failures)} in all)"
    assert len(patterns()) >= 40 and walked > 5000, walked


@pytest.mark.parametrize("path", ["/operations/a%00b/", "/operations/%01/report/"])
def test_a_control_character_in_a_path_segment_is_404(visitors, path) -> None:
    _real, who = visitors
    _label, client, _headers = who[0]
    assert client.get(path).status_code == 404


@pytest.mark.parametrize("query", ["q=a%00b", "page=%00", "provider=%1b", "status=x%7f"])
def test_a_control_character_in_a_query_is_400_with_a_message(visitors, query) -> None:
    _real, who = visitors
    _label, client, _headers = who[0]
    answer = client.get(f"/operations/?{query}")
    assert answer.status_code == 400
    assert "control character" in answer.content.decode()


def test_a_nul_in_a_form_field_or_a_cookie_never_reaches_a_query(visitors, client: Client) -> None:
    real, who = visitors
    _label, signed_in, _headers = who[0]
    handed = signed_in.post(f"/cards/{real['escalation_id']}/reassign/", {"to": "bob\x00"})
    assert handed.status_code == 400 and "'to' holds a control character" in handed.content.decode()
    # A note keeps its line breaks and tabs.
    noted = signed_in.post(f"/cards/{real['escalation_id']}/notes/", {"note": "one\r\n\ttwo"})
    assert noted.status_code < 400
    # A session cookie with NUL in it is no session: the sign-in page, not a 500.
    stranger = Client()
    stranger.cookies["sessionid"] = "abcdefgh\x00ijkl"
    assert stranger.get("/operations/").status_code == 302


def test_the_api_answers_problem_json(visitors) -> None:
    _real, who = visitors
    _label, agent, headers = who[2]
    answer = agent.get("/api/v1/operations?status=%00", **headers)
    assert answer.status_code == 400 and answer.json()["code"] == "invalid_field"
    missing = agent.get("/api/v1/operations/a%00b", **headers)
    assert missing.status_code == 404 and missing.json()["code"] == "not_found"
