"""The fake provider is a real HTTP server: drive every scenario over sockets with httpx."""

from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Iterator
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from pathlib import Path

import httpx
import pytest

from demo.fakeprovider import FakeProvider
from demo.replies import http_date, parse_job_id

ROOT = Path(__file__).resolve().parents[2]
CANARY = "canary-5f1d2c-DO-NOT-LEAK"
RFC850 = re.compile(
    r"^(Monday|Tuesday|Wednesday|Thursday|Friday|Saturday|Sunday), \d\d-[A-Z][a-z]{2}-\d\d \d\d:\d\d:\d\d GMT$"
)
ASCTIME = re.compile(r"^(Mon|Tue|Wed|Thu|Fri|Sat|Sun) [A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \d{4}$")


@pytest.fixture(scope="module")
def provider() -> Iterator[FakeProvider]:
    # One server for the module (starting and stopping costs ~0.1 s); job ids are unique per test.
    with FakeProvider().start() as fp:
        yield fp


@pytest.fixture
def client(provider: FakeProvider) -> Iterator[httpx.Client]:
    with httpx.Client(base_url=provider.base_url, timeout=5) as c:
        yield c


def jid(spec: str) -> str:
    """A unique job id for a scenario spec (the fake ignores the unknown `id` parameter)."""
    return f"{spec}__id={uuid.uuid4().hex[:10]}"


def poll(client: httpx.Client, job_id: str, times: int) -> list[httpx.Response]:
    return [client.get(f"/v1/jobs/{job_id}") for _ in range(times)]


def states(responses: list[httpx.Response]) -> list[object]:
    return [r.json().get("state") if r.status_code == 200 else r.status_code for r in responses]


def test_parse_job_id_splits_on_double_underscore_and_first_equals() -> None:
    assert parse_job_id("bad_hint__value=a=b__polls=2__junk") == ("bad_hint", {"value": "a=b", "polls": "2"})


def test_http_date_forms_match_rfc_9110_examples() -> None:
    ts = datetime(1994, 11, 6, 8, 49, 37, tzinfo=UTC).timestamp()
    assert http_date(ts) == "Sun, 06 Nov 1994 08:49:37 GMT"
    assert http_date(ts, "rfc850") == "Sunday, 06-Nov-94 08:49:37 GMT"
    assert http_date(ts, "asctime") == "Sun Nov  6 08:49:37 1994"


def test_health_and_unknown_paths(client: httpx.Client) -> None:
    assert client.get("/_health").status_code == 200
    assert client.get("/nope").status_code == 404
    assert client.get("/v1/jobs/").status_code == 404
    assert client.post("/v1/jobs/x").status_code == 404


def test_slow_success_runs_then_succeeds_and_is_logged(client: httpx.Client, provider: FakeProvider) -> None:
    job = jid("slow_success__polls=2")
    responses = poll(client, job, 4)
    assert states(responses) == ["running", "running", "succeeded", "succeeded"]
    progress = [r.json()["progress_percent"] for r in responses]
    assert progress[0] < progress[1] < progress[2] == 100
    done = responses[2].json()
    assert done["id"] == job
    assert done["result"] == {"output_url": f"https://files.fake.test/{job}.csv"}
    assert responses[0].headers["content-type"] == "application/json; charset=utf-8"
    assert parsedate_to_datetime(responses[0].headers["date"]).tzinfo is not None

    log = provider.requests(job)
    assert [e["n"] for e in log] == [1, 2, 3, 4]
    assert {(e["kind"], e["method"], e["status"], e["auth"], e["job_id"]) for e in log} == {
        ("status", "GET", 200, "absent", job)
    }
    assert [r.headers["x-request-id"] for r in responses] == [f"req_{e['seq']}" for e in log]
    assert all(isinstance(e["at"], float) for e in log)


def test_unknown_scenario_defaults_to_two_polls(client: httpx.Client) -> None:
    assert states(poll(client, jid("job-123"), 3)) == ["running", "running", "succeeded"]


def test_percent_encoded_job_id_is_decoded(client: httpx.Client, provider: FakeProvider) -> None:
    job = jid("slow_success__polls=0") + ":a+b"
    r = client.get("/v1/jobs/" + job.replace(":", "%3A").replace("+", "%2B"))
    assert r.json()["id"] == job
    assert len(provider.requests(job)) == 1


def test_late_failure_preserves_error(client: httpx.Client) -> None:
    responses = poll(client, jid("late_failure__polls=1"), 2)
    assert states(responses) == ["running", "failed"]
    assert responses[1].json()["error"] == {
        "code": "export_failed",
        "message": "Disk quota exceeded on export worker 7",
        "detail": {"worker": 7},
    }


def test_never_finishes(client: httpx.Client) -> None:
    responses = poll(client, jid("never_finishes"), 6)
    assert set(states(responses)) == {"running"}
    assert all(r.json()["progress_percent"] < 100 for r in responses)


def test_duplicate_completion_repeats_identical_body(client: httpx.Client) -> None:
    responses = poll(client, jid("duplicate_completion"), 4)
    assert states(responses) == ["running", "succeeded", "succeeded", "succeeded"]
    assert responses[1].content == responses[2].content == responses[3].content


def test_terminal_flip(client: httpx.Client) -> None:
    assert states(poll(client, jid("terminal_flip"), 4)) == ["running", "succeeded", "failed", "failed"]


def test_retry_after_seconds(client: httpx.Client) -> None:
    responses = poll(client, jid("retry_after_seconds"), 3)
    assert states(responses) == [503, "running", "succeeded"]
    assert responses[0].headers["retry-after"] == "120"
    assert "retry-after" not in responses[1].headers
    assert responses[0].json()["error"]["code"] == "unavailable"

    responses = poll(client, jid("retry_after_seconds__status=429__value=7__times=2"), 3)
    assert states(responses) == [429, 429, "running"]
    assert [r.headers.get("retry-after") for r in responses] == ["7", "7", None]


def _parse_retry_after(value: str, form: str) -> datetime:
    if form == "imf":
        return parsedate_to_datetime(value)
    if form == "rfc850":
        assert RFC850.match(value), value
        return datetime.strptime(value, "%A, %d-%b-%y %H:%M:%S GMT").replace(tzinfo=UTC)
    assert ASCTIME.match(value), value
    return datetime.strptime(value, "%a %b %d %H:%M:%S %Y").replace(tzinfo=UTC)


@pytest.mark.parametrize("form", ["imf", "rfc850", "asctime"])
@pytest.mark.parametrize("offset", [30, -30, 86400])
def test_retry_after_date_forms(client: httpx.Client, form: str, offset: int) -> None:
    responses = poll(client, jid(f"retry_after_date__form={form}__offset={offset:+d}"), 3)
    assert states(responses) == [503, "running", "succeeded"]
    server_now = parsedate_to_datetime(responses[0].headers["date"])
    retry_at = _parse_retry_after(responses[0].headers["retry-after"], form)
    assert abs((retry_at - server_now).total_seconds() - offset) <= 1


def test_retry_after_date_skewed_date_header(client: httpx.Client) -> None:
    responses = poll(client, jid("retry_after_date__date_skew=-3600__status=429__times=1"), 2)
    assert states(responses) == [429, "running"]
    for r in responses:  # the skewed clock shows on every answer
        skew = (parsedate_to_datetime(r.headers["date"]) - datetime.now(UTC)).total_seconds()
        assert abs(skew + 3600) <= 2
    retry_at = parsedate_to_datetime(responses[0].headers["retry-after"])
    assert abs((retry_at - datetime.now(UTC)).total_seconds() - 30) <= 2


def test_rate_limited_no_hint(client: httpx.Client) -> None:
    responses = poll(client, jid("rate_limited_no_hint"), 5)
    assert states(responses) == [429] * 5
    assert all("retry-after" not in r.headers for r in responses)
    assert states(poll(client, jid("rate_limited_no_hint__times=2"), 4)) == [429, 429, "running", "succeeded"]


def test_not_found_then_ok_and_ok_then_gone(client: httpx.Client) -> None:
    assert states(poll(client, jid("not_found_then_ok"), 3)) == [404, 404, "succeeded"]
    assert states(poll(client, jid("ok_then_gone"), 3)) == ["running", 404, 404]


def test_succeeded_no_result_and_past_own_expiry(client: httpx.Client) -> None:
    body = client.get(f"/v1/jobs/{jid('succeeded_no_result')}").json()
    assert (body["state"], body["result"]) == ("succeeded", {})
    body = client.get(f"/v1/jobs/{jid('past_own_expiry')}").json()
    assert (body["state"], body["expires_at"]) == ("running", "2000-01-01T00:00:00Z")


@pytest.mark.parametrize(
    ("token", "expected"),
    [("needs_payment", "needs_payment"), ("SUCCEEDED", "SUCCEEDED"), ("Succeeded", "Succeeded"), ("null", None)],
)
def test_unknown_state_values(client: httpx.Client, token: str, expected: object) -> None:
    body = client.get(f"/v1/jobs/{jid(f'unknown_state__value={token}')}").json()
    assert "state" in body
    assert body["state"] == expected


def test_unknown_state_missing_and_number(client: httpx.Client) -> None:
    assert "state" not in client.get(f"/v1/jobs/{jid('unknown_state__value=missing')}").json()
    assert client.get(f"/v1/jobs/{jid('unknown_state__value=number')}").json()["state"] == 42
    assert client.get(f"/v1/jobs/{jid('unknown_state')}").json()["state"] == "needs_payment"


def test_partial_counts(client: httpx.Client) -> None:
    body = client.get(f"/v1/jobs/{jid('partial__total=50__failed=7')}").json()
    assert body["state"] == "succeeded"
    assert body["result"]["output_url"].startswith("https://files.fake.test/partial__")
    assert body["summary"] == {"processed": 50, "succeeded": 43, "failed": 7}


@pytest.mark.parametrize(
    ("token", "headers"),
    [
        ("-1", ["-1"]),
        ("0", ["0"]),
        ("1e10", ["10000000000"]),
        ("1.5", ["1.5"]),
        ("plus3", ["+3"]),
        ("space120", ["120"]),  # h11 strips the leading space; the raw bytes are checked below
        ("comma", ["120, 60"]),
        ("two", ["120", "60"]),
        ("garbage", ["soon"]),
    ],
)
def test_bad_hint_headers(client: httpx.Client, token: str, headers: list[str]) -> None:
    responses = poll(client, jid(f"bad_hint__value={token}__polls=1"), 2)
    assert states(responses) == ["running", "succeeded"]
    assert responses[0].headers.get_list("retry-after") == headers
    assert "retry-after" not in responses[1].headers


def test_bad_hint_space_is_on_the_wire(provider: FakeProvider) -> None:
    with socket.create_connection(("127.0.0.1", provider.port), timeout=5) as sock:
        sock.sendall(f"GET /v1/jobs/{jid('bad_hint__value=space120')} HTTP/1.1\r\nHost: x\r\n\r\n".encode())
        raw = b""
        while b"\r\n\r\n" not in raw:
            raw += sock.recv(65536)
    assert b"\r\nRetry-After:  120\r\n" in raw


@pytest.mark.parametrize(
    ("token", "value"),
    [("0", 0), ("-5", -5), ("86400000", 86400000), ("1.5", 1.5), ("30", 30), ("string", "120"), ("null", None)],
)
def test_poll_interval_hint(client: httpx.Client, token: str, value: object) -> None:
    responses = poll(client, jid(f"poll_interval_hint__value={token}"), 3)
    assert states(responses) == ["running", "running", "succeeded"]
    assert "poll_after_seconds" in responses[0].json()
    assert responses[0].json()["poll_after_seconds"] == value
    assert type(responses[0].json()["poll_after_seconds"]) is type(value)


def test_poll_time_hint(client: httpx.Client) -> None:
    responses = poll(client, jid("poll_time_hint__offset=+90__polls=1"), 2)
    assert states(responses) == ["running", "succeeded"]
    when = responses[0].json()["next_check_at"]
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", when)
    delta = (datetime.fromisoformat(when) - datetime.now(UTC)).total_seconds()
    assert 88 <= delta <= 91
    assert client.get(f"/v1/jobs/{jid('poll_time_hint__offset=bad')}").json()["next_check_at"] == "next tuesday"


def test_huge_body_declares_its_length(client: httpx.Client) -> None:
    r = client.get(f"/v1/jobs/{jid('huge_body')}")
    assert int(r.headers["content-length"]) == len(r.content) == 2097152
    assert r.content.startswith(b'{"state":"running","pad":"xxxx')
    small = client.get(f"/v1/jobs/{jid('huge_body__size=1000')}")
    assert len(small.content) == 1000
    assert small.json()["state"] == "running"


def test_huge_body_client_hanging_up_early_is_harmless(client: httpx.Client, provider: FakeProvider) -> None:
    with client.stream("GET", f"/v1/jobs/{jid('huge_body__size=8388608')}") as r:
        next(r.iter_bytes(65536))  # a capped reader stops early and drops the connection
    assert client.get("/_health").status_code == 200


@pytest.mark.parametrize(
    ("kind", "body", "content_type"),
    [
        ("truncated", b'{"state":"runn', "application/json; charset=utf-8"),
        ("empty", b"", "application/json; charset=utf-8"),
        ("nan", b'{"state":"running","progress_percent":NaN}', "application/json; charset=utf-8"),
        ("dupkeys", b'{"state":"running","state":"succeeded"}', "application/json; charset=utf-8"),
    ],
)
def test_invalid_json(client: httpx.Client, kind: str, body: bytes, content_type: str) -> None:
    r = client.get(f"/v1/jobs/{jid(f'invalid_json__kind={kind}')}")
    assert (r.status_code, r.content, r.headers["content-type"]) == (200, body, content_type)
    assert r.headers["content-length"] == str(len(body))


def test_invalid_json_html(client: httpx.Client) -> None:
    r = client.get(f"/v1/jobs/{jid('invalid_json__kind=html')}")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert r.text.startswith("<html>")
    assert client.get(f"/v1/jobs/{jid('invalid_json')}").content == b'{"state":"runn'


def test_slowloris_dribbles_the_body(client: httpx.Client) -> None:
    started = time.monotonic()
    with client.stream("GET", f"/v1/jobs/{jid('slowloris__chunk_delay_ms=50__chunk_bytes=25')}") as r:
        headers_after = time.monotonic() - started
        length = int(r.headers["content-length"])
        chunks = list(r.iter_raw())
    elapsed = time.monotonic() - started
    body = b"".join(chunks)
    assert len(body) == length
    assert json.loads(body)["state"] == "running"
    pauses = -(-length // 25) - 1
    assert headers_after < pauses * 0.05 / 2  # headers come at once, before the dribble
    assert pauses * 0.05 <= elapsed < pauses * 0.05 + 1.0


def test_slowloris_silent_never_answers(client: httpx.Client, provider: FakeProvider) -> None:
    job = jid("slowloris__mode=silent__hold_s=2")
    with pytest.raises(httpx.ReadTimeout):
        client.get(f"/v1/jobs/{job}", timeout=httpx.Timeout(5, read=0.2))
    assert [(e["n"], e["status"]) for e in provider.requests(job)] == [(1, None)]


def test_stop_is_prompt_during_slowloris_and_idle_keepalive() -> None:
    fp = FakeProvider().start()
    base_url = fp.base_url
    errors: list[httpx.HTTPError] = []

    def fetch(job: str) -> None:
        try:
            httpx.get(f"{base_url}/v1/jobs/{job}", timeout=30)
        except httpx.HTTPError as exc:
            errors.append(exc)

    idle = httpx.Client(timeout=30)
    idle.get(f"{base_url}/_health")  # leaves a keep-alive connection parked in a handler thread
    threads = [
        threading.Thread(target=fetch, args=(job,), daemon=True)
        for job in ("slowloris__chunk_delay_ms=1000", "slowloris__mode=silent")
    ]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 2
    while len(fp.requests()) < 2 and time.monotonic() < deadline:
        time.sleep(0.01)
    started = time.monotonic()
    fp.stop()
    assert time.monotonic() - started < 1.0
    for t in threads:
        t.join(timeout=2)
    assert len(errors) == 2  # both responses were cut off, neither completed
    with pytest.raises(httpx.TransportError):
        idle.get(f"{base_url}/_health")
    idle.close()


def test_held_answers_late_once(client: httpx.Client) -> None:
    job = jid("held__hold_ms=300")
    started = time.monotonic()
    first = client.get(f"/v1/jobs/{job}")
    held_for = time.monotonic() - started
    started = time.monotonic()
    second = client.get(f"/v1/jobs/{job}")
    assert held_for >= 0.3
    assert time.monotonic() - started < 0.25  # only the first request is held
    assert states([first, second]) == ["running", "succeeded"]


def test_held_request_is_logged_while_in_flight(provider: FakeProvider) -> None:
    job = jid("held__hold_ms=1500")
    t = threading.Thread(target=lambda: httpx.get(f"{provider.base_url}/v1/jobs/{job}", timeout=5), daemon=True)
    t.start()
    deadline = time.monotonic() + 5
    while not provider.requests(job) and time.monotonic() < deadline:
        time.sleep(0.01)
    assert t.is_alive()  # still waiting for its answer, yet already counted
    assert [(e["n"], e["status"]) for e in provider.requests(job)] == [(1, 200)]
    t.join()


def test_delay_ms_on_any_scenario(client: httpx.Client) -> None:
    started = time.monotonic()
    r = client.get(f"/v1/jobs/{jid('never_finishes__delay_ms=150')}")
    assert time.monotonic() - started >= 0.15
    assert r.json()["state"] == "running"


def test_flaky_5xx_pattern(client: httpx.Client) -> None:
    responses = poll(client, jid("flaky_5xx__polls=4"), 8)
    assert states(responses) == [500, 502, 504, "running", 500, 502, 504, "succeeded"]


def test_flaky_drop_closes_without_answer(client: httpx.Client, provider: FakeProvider) -> None:
    job = jid("flaky_5xx__pattern=drop.200__polls=0")
    with pytest.raises(httpx.RemoteProtocolError):
        client.get(f"/v1/jobs/{job}")
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "succeeded"
    assert [e["status"] for e in provider.requests(job)] == [None, 200]


def test_redirects(client: httpx.Client, provider: FakeProvider) -> None:
    r = client.get(f"/v1/jobs/{jid('redirect')}")
    assert (r.status_code, r.headers["location"]) == (302, "http://169.254.169.254/latest/meta-data/")
    job = jid("redirect__to=loop")
    r = client.get(f"/v1/jobs/{job}")
    assert (r.status_code, r.headers["location"]) == (302, f"{provider.base_url}/v1/jobs/{job}")


def test_auth_revoked_and_credential_never_recorded(client: httpx.Client, provider: FakeProvider) -> None:
    job = jid("auth_revoked")
    r = client.get(f"/v1/jobs/{job}", headers={"Authorization": f"Bearer {CANARY}"})
    assert r.status_code == 401
    assert r.json() == {"error": {"code": "token_revoked", "message": "The API token was revoked"}}

    rotated = jid("auth_revoked__accept=rotated")
    bad = client.get(f"/v1/jobs/{rotated}", headers={"Authorization": f"Bearer {CANARY}"})
    good = [client.get(f"/v1/jobs/{rotated}", headers={"Authorization": f"Bearer {CANARY}-rotated"}) for _ in range(2)]
    # n counts every status GET, the rejected one included: slow_success(polls=1) is past its running poll.
    assert states([bad, *good]) == [401, "succeeded", "succeeded"]
    assert client.get(f"/v1/jobs/{rotated}").status_code == 401

    assert [e["auth"] for e in provider.requests(rotated)] == ["present", "present", "present", "absent"]
    assert CANARY not in client.get("/_requests").text
    assert CANARY not in repr(provider.requests())
    assert CANARY not in client.get(f"/console/{job}").text


def test_cancel_ok(client: httpx.Client, provider: FakeProvider) -> None:
    job = jid("cancel_ok")
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "running"
    r = client.post(f"/v1/jobs/{job}/cancel", json={"reason": "agent asked"})
    assert (r.status_code, r.json()) == (200, {"id": job, "state": "cancelled"})
    assert states(poll(client, job, 2)) == ["cancelled", "cancelled"]
    assert [(e["kind"], e["n"], e["method"]) for e in provider.requests(job)] == [
        ("status", 1, "GET"),
        ("cancel", 1, "POST"),
        ("status", 2, "GET"),
        ("status", 3, "GET"),
    ]


def test_cancel_unsupported_and_other(client: httpx.Client) -> None:
    job = jid("cancel_unsupported")
    r = client.post(f"/v1/jobs/{job}/cancel")
    assert (r.status_code, r.headers["allow"]) == (405, "GET")
    assert client.get(f"/v1/jobs/{job}").json()["state"] == "running"

    job = jid("slow_success__polls=1")
    r = client.post(f"/v1/jobs/{job}/cancel")
    assert (r.status_code, r.json()) == (202, {"id": job, "state": "cancelling"})
    assert states(poll(client, job, 2)) == ["running", "succeeded"]  # the job keeps its behaviour


def test_bench_is_lean(client: httpx.Client) -> None:
    responses = poll(client, jid("bench__polls=1"), 2)
    assert responses[0].json().keys() == {"id", "state"}
    assert responses[1].json()["result"]["output_url"].startswith("https://files.fake.test/bench__")


def test_timed_runs_until_its_wall_clock_moment(client: httpx.Client) -> None:
    past, future = jid("timed__done_ms=1000"), jid(f"timed__done_ms={10**15}")
    assert client.get(f"/v1/jobs/{future}").json() == {"id": future, "state": "running"}
    assert client.get(f"/v1/jobs/{past}").json()["state"] == "succeeded"


def test_console_page_escapes_and_is_logged(client: httpx.Client, provider: FakeProvider) -> None:
    job = jid("slow_success") + "<b>"
    client.get(f"/v1/jobs/{job}")
    r = client.get(f"/console/{job}")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert "&lt;b&gt;" in r.text and "<b>" not in r.text
    assert "Status requests received: 1." in r.text
    assert [(e["kind"], e["n"], e["status"]) for e in provider.requests(job)] == [
        ("status", 1, 200),
        ("console", 1, 200),
    ]


def test_requests_endpoint_filters_and_reset() -> None:
    # A private server, so the log holds only this test's requests and the reset touches no one else.
    with FakeProvider() as fp, httpx.Client(base_url=fp.base_url) as c:
        a, b = jid("never_finishes"), jid("never_finishes")
        for job in (a, b, a):
            c.get(f"/v1/jobs/{job}")
        everything = c.get("/_requests").json()["requests"]
        assert [e["job_id"] for e in everything] == [a, b, a]
        assert [e["n"] for e in c.get("/_requests", params={"job_id": a}).json()["requests"]] == [1, 2]
        since = everything[0]["seq"]
        assert [e["job_id"] for e in c.get("/_requests", params={"since": since}).json()["requests"]] == [b, a]
        assert fp.requests(a, since=everything[1]["seq"]) == [everything[2]]

        assert c.post("/_reset").status_code == 200
        assert fp.requests() == []
        assert c.get(f"/v1/jobs/{a}").json()["progress_percent"] == 5  # counters start over
        fp.reset()
        assert fp.requests() == []


def test_keep_alive_reuses_one_connection(provider: FakeProvider) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", provider.port, timeout=5)
    job = jid("slow_success__polls=3")
    conn.request("GET", f"/v1/jobs/{job}")
    conn.getresponse().read()
    sock = conn.sock
    for _ in range(4):
        conn.request("GET", f"/v1/jobs/{job}")
        response = conn.getresponse()
        response.read()
        assert response.status == 200
        assert conn.sock is sock  # not closed and reopened
    conn.request("POST", f"/v1/jobs/{job}/cancel", body=b'{"x": 1}', headers={"Content-Type": "application/json"})
    assert conn.getresponse().read() == json.dumps({"id": job, "state": "cancelling"}, separators=(",", ":")).encode()
    conn.request("GET", "/_health")
    assert conn.getresponse().status == 200
    assert conn.sock is sock  # the POST body was consumed, the connection stayed in sync
    conn.close()


def test_server_sockets_have_nagle_off(provider: FakeProvider) -> None:
    # Responses go out in one write, but slowloris and bodies over 64 KiB take several; with Nagle on,
    # delayed ACKs would add ~40 ms to each of those.
    with socket.create_connection(("127.0.0.1", provider.port), timeout=5) as sock:
        sock.sendall(b"GET /_health HTTP/1.1\r\nHost: x\r\n\r\n")
        sock.recv(65536)
        server_side = [conn for conn in provider._running._connections if conn.getpeername() == sock.getsockname()]
        assert len(server_side) == 1
        assert server_side[0].getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def _wait_for_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    return process.stdout.readline().strip()


@pytest.mark.parametrize(
    "command",
    [
        [sys.executable, "-m", "demo.fakeprovider", "--port", "0"],
        [sys.executable, "manage.py", "fakeprovider", "--port", "0"],
    ],
    ids=["python-m", "manage.py"],
)
def test_command_serves_until_sigterm(command: list[str]) -> None:
    env = {**os.environ, "DEBUG": "1", "PYTHONUNBUFFERED": "1"}
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = _wait_for_line(process)
        match = re.fullmatch(r"fake provider listening on (http://127\.0\.0\.1:\d+)", line)
        assert match, (line, process.stderr.read() if process.poll() is not None else "")
        assert httpx.get(f"{match[1]}/v1/jobs/never_finishes").json()["state"] == "running"
        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=5) == 0
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
