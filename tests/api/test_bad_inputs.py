"""Bad inputs an agent (or a hostile client) sends, items 1-24 of the agent API's bad-input list.

Each gets its documented problem code in an application/problem+json body, never a 500, and
writes nothing (row counts of every table a request could touch are unchanged).
"""

from __future__ import annotations

import json
import threading

import httpx
import pytest

from operations.models import AuditEntry, Authorization, CallbackDelivery, IdempotencyKey, Operation
from tests.api.conftest import ApiClient
from tests.support import job_id

pytestmark = pytest.mark.django_db

COUNTED = (Operation, Authorization, IdempotencyKey, AuditEntry, CallbackDelivery)


def counts() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in COUNTED)


def assert_problem(response: object, status: int, code: str) -> dict:
    assert response.status_code == status, (response.status_code, response.content[:300])
    assert response["Content-Type"] == "application/problem+json"
    body = response.json()
    assert body["code"] == code and body["status"] == status
    assert body["type"].endswith(f"/problems/{code}") and body["title"] and body["detail"]
    return body


@pytest.fixture
def valid(profile) -> dict:
    return {"provider": profile.slug, "provider_job_id": job_id("slow_success")}


def _raw(text: str) -> bytes:
    return text.encode()


# (case id, raw body or dict, content type, extra headers) -> (status, code)
BODY_CASES = [
    # 1. not JSON, truncated, trailing garbage, not an object
    ("not-json", b"provider=x", None, 400, "invalid_json"),
    ("truncated", b'{"provider": "x"', None, 400, "invalid_json"),
    ("trailing-garbage", b'{"provider": "x"} x', None, 400, "invalid_json"),
    ("array", b"[]", None, 400, "invalid_json"),
    ("string", b'"x"', None, 400, "invalid_json"),
    ("number", b"1", None, 400, "invalid_json"),
    ("empty-body", b"", None, 400, "invalid_json"),
    # 2. duplicate keys
    ("duplicate-keys", b'{"provider": "a", "provider": "b", "provider_job_id": "j"}', None, 400, "invalid_json"),
    # 3. NaN / Infinity
    ("nan", b'{"max_status_requests": NaN}', None, 400, "invalid_json"),
    ("infinity", b'{"max_status_requests": Infinity}', None, 400, "invalid_json"),
    ("minus-infinity", b'{"max_status_requests": -Infinity}', None, 400, "invalid_json"),
    # 4. encodings
    ("not-utf8", b'{"purpose": "\xff\xfe"}', None, 400, "invalid_json"),
    ("bom", b'\xef\xbb\xbf{"provider": "x"}', None, 400, "invalid_json"),
    ("lone-surrogate", b'{"purpose": "\\ud800"}', None, 400, "invalid_json"),
    ("nul", b'{"purpose": "a\\u0000b"}', None, 400, "invalid_json"),
    ("huge-integer", b'{"max_status_requests": ' + b"9" * 5000 + b"}", None, 400, "invalid_json"),
    # 5. depth, key count
    ("too-deep", _raw('{"metadata": ' + '{"a": ' * 20 + "1" + "}" * 20 + "}"), None, 400, "invalid_json"),
    ("too-many-keys", _raw(json.dumps({"metadata": {f"k{i}": "v" for i in range(1200)}})), None, 400, "invalid_json"),
    # 6. content types
    ("text-plain", b'{"provider": "x"}', "text/plain", 415, "unsupported_media_type"),
    ("form", b"provider=x", "application/x-www-form-urlencoded", 415, "unsupported_media_type"),
    ("latin1-charset", b'{"provider": "x"}', "application/json; charset=latin-1", 415, "unsupported_media_type"),
]


@pytest.mark.parametrize(
    ("raw", "content_type", "status", "code"), [c[1:] for c in BODY_CASES], ids=[c[0] for c in BODY_CASES]
)
def test_malformed_bodies_are_refused(api, profile, raw, content_type, status, code):
    before = counts()
    response = api.post("/api/v1/operations", raw=raw, content_type=content_type or "application/json")
    assert_problem(response, status, code)
    assert counts() == before


def test_missing_content_type_is_415(api, valid):
    before = counts()
    response = api.client.generic(
        "POST", "/api/v1/operations", json.dumps(valid).encode(), content_type="", headers=api.headers
    )
    assert_problem(response, 415, "unsupported_media_type")
    assert counts() == before


def test_oversized_body_is_413(api, valid):
    before = counts()
    response = api.register(**valid, purpose="x" * (70 * 1024))
    assert_problem(response, 413, "body_too_large")
    assert counts() == before


FIELD_CASES = [
    # 7. unknown fields
    ("timeout-seconds", {"timeout_seconds": 30}, 400, "unknown_field"),
    ("callbackUrl", {"callbackUrl": "https://example.com/"}, 400, "unknown_field"),
    ("nested-unknown", {"callback": {"url": "https://example.com/", "events": []}}, 400, "unknown_field"),
    ("missing-required", {"provider_job_id": None}, 400, "missing_field"),
    # 8. type confusion
    ("deadline-number", {"deadline": 1764536400}, 400, "invalid_field"),
    ("metadata-list", {"metadata": []}, 400, "invalid_field"),
    ("purpose-object", {"purpose": {"a": 1}}, 400, "invalid_field"),
    ("budget-string", {"max_status_requests": "5"}, 400, "invalid_field"),
    ("budget-float", {"max_status_requests": 1.5}, 400, "invalid_field"),
    ("budget-bool", {"max_status_requests": True}, 400, "invalid_field"),
    ("metadata-number-value", {"metadata": {"a": 1}}, 400, "invalid_field"),
    # 9. provider
    ("provider-unknown", {"provider": "nope"}, 422, "unknown_provider"),
    ("provider-empty", {"provider": ""}, 422, "unknown_provider"),
    ("provider-whitespace", {"provider": " PROFILE "}, 422, "unknown_provider"),
    # 10. provider job ids
    ("job-empty", {"provider_job_id": ""}, 422, "invalid_provider_job_id"),
    ("job-blank", {"provider_job_id": "   "}, 422, "invalid_provider_job_id"),
    ("job-long", {"provider_job_id": "a" * 201}, 422, "invalid_provider_job_id"),
    ("job-traversal", {"provider_job_id": "../../v1/account"}, 422, "invalid_provider_job_id"),
    ("job-encoded-traversal", {"provider_job_id": "%2e%2e%2f"}, 422, "invalid_provider_job_id"),
    ("job-slash", {"provider_job_id": "a/b"}, 422, "invalid_provider_job_id"),
    ("job-dotdot", {"provider_job_id": ".."}, 422, "invalid_provider_job_id"),
    ("job-query", {"provider_job_id": "a?b=1"}, 422, "invalid_provider_job_id"),
    ("job-fragment", {"provider_job_id": "a#b"}, 422, "invalid_provider_job_id"),
    ("job-crlf", {"provider_job_id": "a\r\nX-Injected: 1"}, 422, "invalid_provider_job_id"),
    ("job-cyrillic", {"provider_job_id": "j\u043eb"}, 422, "invalid_provider_job_id"),
    ("job-fullwidth", {"provider_job_id": "\uff11\uff12"}, 422, "invalid_provider_job_id"),
    # 11. purpose
    ("purpose-long", {"purpose": "p" * 281}, 422, "invalid_value"),
    ("purpose-control", {"purpose": "a\x07b"}, 422, "invalid_value"),
    ("purpose-c1-control", {"purpose": "a\x85b"}, 422, "invalid_value"),
    ("purpose-bidi-override", {"purpose": "invoice \u202egpj.exe"}, 422, "invalid_value"),
    # 12. deadlines
    ("deadline-past", {"deadline": "2020-01-01T00:00:00Z"}, 422, "deadline_in_past"),
    ("deadline-too-far", {"deadline": "2099-01-01T00:00:00Z"}, 422, "deadline_too_far"),
    ("deadline-no-offset", {"deadline": "2026-12-01T10:00:00"}, 400, "invalid_field"),
    ("deadline-impossible", {"deadline": "2026-02-30T10:00:00Z"}, 400, "invalid_field"),
    ("deadline-leap-second", {"deadline": "2026-12-31T23:59:60Z"}, 400, "invalid_field"),
    ("deadline-year-10000", {"deadline": "10000-01-01T00:00:00Z"}, 400, "invalid_field"),
    ("deadline-past-year-9999-in-utc", {"deadline": "9999-12-31T23:59:59-23:59"}, 400, "invalid_field"),
    ("deadline-before-year-1-in-utc", {"deadline": "0001-01-01T00:00:00+23:59"}, 400, "invalid_field"),
    ("business-deadline-overflow", {"business_deadline": "9999-12-31T23:59:59-23:59"}, 400, "invalid_field"),
    ("deadline-us-format", {"deadline": "12/01/2026"}, 400, "invalid_field"),
    ("business-deadline-past", {"business_deadline": "2020-01-01T00:00:00Z"}, 422, "invalid_value"),
    # 13. budgets (poll intervals come from the profile: a `poll` field is unknown)
    ("budget-zero", {"max_status_requests": 0}, 422, "invalid_value"),
    ("budget-negative", {"max_status_requests": -3}, 422, "invalid_value"),
    ("poll-intervals", {"poll": {"initial_interval_s": 5}}, 400, "unknown_field"),
    # 14. callback URLs (more in test_callbacks.py)
    ("callback-http", {"callback": {"url": "http://example.com/hook"}}, 422, "callback_url_rejected"),
    ("callback-loopback", {"callback": {"url": "https://127.0.0.1/hook"}}, 422, "callback_url_rejected"),
    # 15. metadata
    ("metadata-17-keys", {"metadata": {f"k{i}": "v" for i in range(17)}}, 422, "invalid_value"),
    ("metadata-long-key", {"metadata": {"k" * 41: "v"}}, 422, "invalid_value"),
    ("metadata-long-value", {"metadata": {"k": "v" * 501}}, 422, "invalid_value"),
    ("metadata-control-value", {"metadata": {"k": "a\x01"}}, 422, "invalid_value"),
    ("metadata-bidi-key", {"metadata": {"k\u2066": "v"}}, 422, "invalid_value"),
]


@pytest.mark.parametrize(("change", "status", "code"), [c[1:] for c in FIELD_CASES], ids=[c[0] for c in FIELD_CASES])
def test_invalid_fields_are_refused_with_their_code(api, valid, profile, clock, change, status, code):
    body = {**valid, **change}
    if change.get("provider") == " PROFILE ":
        body["provider"] = f" {profile.slug} "
    body = {key: value for key, value in body.items() if value is not None}
    before = counts()
    problem = assert_problem(api.register(**body), status, code)
    assert problem["errors"] and all(error["pointer"].startswith("/body") for error in problem["errors"])
    assert counts() == before


def test_a_differently_cased_provider_is_unknown(api, valid, profile):
    assert_problem(api.register(**{**valid, "provider": profile.slug.upper()}), 422, "unknown_provider")


# 16. Idempotency-Key headers
@pytest.mark.parametrize(
    ("value", "code"),
    [
        ("a, b", "multiple_idempotency_keys"),
        ("", "idempotency_key_invalid"),
        ("k" * 256, "idempotency_key_invalid"),
        ("k\xe9y", "idempotency_key_invalid"),
        ('"abc', "idempotency_key_invalid"),
        ("has space", "idempotency_key_invalid"),
    ],
)
def test_bad_idempotency_keys_are_400(api, valid, value, code):
    before = counts()
    assert_problem(api.post("/api/v1/operations", valid, **{"Idempotency-Key": value}), 400, code)
    assert counts() == before


@pytest.mark.django_db(transaction=True)
def test_two_idempotency_key_headers_over_http_are_refused(live_api, agent, profile):
    headers = [
        ("Authorization", f"Bearer {agent.token}"),
        ("Idempotency-Key", "key-one"),
        ("Idempotency-Key", "key-two"),
    ]
    body = {"provider": profile.slug, "provider_job_id": job_id("slow_success")}
    response = httpx.post(f"{live_api.url}/api/v1/operations", json=body, headers=headers)
    assert response.status_code == 400 and response.json()["code"] == "multiple_idempotency_keys"
    assert Operation.objects.count() == 0


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("same_key", [True, False], ids=["same-idempotency-key", "same-natural-key"])
def test_two_concurrent_registers_make_one_operation(live_api, agent, profile, same_key):
    body = {"provider": profile.slug, "provider_job_id": job_id("slow_success")}
    headers = {"Authorization": f"Bearer {agent.token}"}
    if same_key:
        headers["Idempotency-Key"] = "concurrent-1"
    barrier = threading.Barrier(2)
    statuses: list[int] = []
    ids: list[str] = []

    def send() -> None:
        with httpx.Client(base_url=live_api.url, headers=headers, timeout=30) as client:
            barrier.wait()
            response = client.post("/api/v1/operations", json=body)
            statuses.append(response.status_code)
            data = response.json()
            ids.append(data.get("id") or data.get("operation_id") or "")

    threads = [threading.Thread(target=send) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert Operation.objects.count() == 1
    assert statuses.count(202) == 1 and set(statuses) - {202} <= {200, 409}, statuses
    if 200 in statuses:
        assert len(set(ids)) == 1


# 18. malformed and foreign ids
@pytest.mark.parametrize("bad", ["op_", "op_!!!", "op_" + "A" * 10_000, "op_' OR '1'='1", "op_.", "x", "op_%00"])
def test_malformed_ids_are_404(api, bad):
    for response in (api.get(f"/api/v1/operations/{bad}"), api.post(f"/api/v1/operations/{bad}/ack")):
        assert response.status_code == 404 and response["Content-Type"] == "application/problem+json"


def test_ids_with_encoded_slashes_are_404(api, register):
    created = register()
    for path in (f"/api/v1/operations/{created['id']}%2F..%2F", f"/api/v1/operations/..%2F{created['id']}"):
        response = api.get(path)
        assert response.status_code == 404 and response["Content-Type"] == "application/problem+json"


# 19. wait timeouts (the async view, here through Django's own handler)
@pytest.mark.django_db(transaction=True)
def test_non_integer_timeouts_are_invalid_timeout(api, register):
    created = register()
    for value in ["-5", "2.5", "1e3", "0x10", " 25 ", "2_5", "\u0662\u0665", "\u00b2", "", "12345"]:
        response = api.client.get(f"/api/v1/operations/{created['id']}/wait", {"timeout_s": value}, headers=api.headers)
        body = assert_problem(response, 400, "invalid_timeout")
        assert body["errors"][0]["pointer"] == "/query/timeout_s", value


@pytest.mark.django_db(transaction=True)
def test_unknown_query_parameters_are_refused(api, register):
    created = register()
    response = api.client.get(f"/api/v1/operations/{created['id']}/wait", {"timeout": "30"}, headers=api.headers)
    assert_problem(response, 400, "unknown_field")
    assert_problem(api.client.get("/api/v1/operations", {"view": "all"}, headers=api.headers), 400, "invalid_field")


# 21. list limits and cursors
@pytest.mark.parametrize(
    ("limit", "status"), [("0", 400), ("-1", 400), ("abc", 400), ("10000", 200), ("1000000", 200), ("100", 200)]
)
def test_list_limits(api, limit, status):
    response = api.client.get("/api/v1/operations", {"limit": limit}, headers=api.headers)
    assert response.status_code == status
    if status == 200:
        assert response.json()["limit"] == 100
    else:
        assert response.json()["code"] == "invalid_field"


@pytest.mark.parametrize("cursor", ["garbage", "eyJhIjoxfQ:abc:def", "x" * 600, "\u00e9"])
def test_forged_cursors_are_invalid_cursor(api, cursor):
    response = api.client.get("/api/v1/operations", {"cursor": cursor}, headers=api.headers)
    assert_problem(response, 400, "invalid_cursor")


def test_a_tampered_cursor_is_invalid_cursor(api, register, clock):
    for _ in range(3):
        register()
        clock.shift(1)
    cursor = api.get("/api/v1/operations?limit=1").json()["next_cursor"]
    tampered = cursor[:-2] + ("AA" if not cursor.endswith("AA") else "BB")
    response = api.client.get("/api/v1/operations", {"cursor": tampered}, headers=api.headers)
    assert_problem(response, 400, "invalid_cursor")


# 23. cancel
def test_cancel_problems(api, register):
    before = counts()
    assert_problem(api.post("/api/v1/operations/op_01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel"), 404, "operation_not_found")
    unknown_with_bad_body = api.post("/api/v1/operations/op_01ARZ3NDEKTSV4RRFFQ69G5FAV/cancel", {"reason": "r" * 281})
    assert_problem(unknown_with_bad_body, 404, "operation_not_found")
    created = register()
    before = counts()
    too_long = assert_problem(
        api.post(f"/api/v1/operations/{created['id']}/cancel", {"reason": "r" * 281}), 422, "invalid_value"
    )
    assert too_long["detail"].startswith("Cancel refused: reason")
    assert_problem(api.post(f"/api/v1/operations/{created['id']}/cancel", {"why": "x"}), 400, "unknown_field")
    assert_problem(
        api.post(f"/api/v1/operations/{created['id']}/cancel", raw=b"reason=x", content_type="text/plain"),
        415,
        "unsupported_media_type",
    )
    response = api.get(f"/api/v1/operations/{created['id']}/cancel")
    assert_problem(response, 405, "method_not_allowed")
    assert response["Allow"] == "POST"
    assert counts() == before
    assert Operation.objects.get(pk=created["id"]).status == "pending"


# 24. ack before done
def test_ack_before_done_is_409_and_writes_nothing(api, register):
    created = register()
    before = counts()
    assert_problem(api.post(f"/api/v1/operations/{created['id']}/ack"), 409, "operation_not_done")
    assert_problem(api.post(f"/api/v1/operations/{created['id']}/ack", {"note": 1}), 400, "unknown_field")
    assert counts() == before


# authentication
@pytest.mark.parametrize(
    "authorization",
    [None, "", "Bearer", "Bearer ", "Basic dXNlcjpwYXNz", "Bearer pdt_not-a-real-token", "Token pdt_x"],
)
def test_requests_without_a_live_token_are_401(profile, authorization):
    client = ApiClient(None)
    headers = {"Authorization": authorization} if authorization is not None else {}
    for response in (
        client.client.get("/api/v1/operations", headers=headers),
        client.client.generic(
            "POST", "/api/v1/operations", b'{"provider": "x"}', content_type="application/json", headers=headers
        ),
    ):
        assert_problem(response, 401, "unauthenticated")
        assert response["WWW-Authenticate"].startswith("Bearer")


def test_huge_integers_and_astral_strings_with_an_idempotency_key_are_refused_cleanly(api, valid):
    """Found by schemathesis: the request fingerprint must not choke on values validation refuses later."""
    before = counts()
    body = {**valid, "max_status_requests": 8069022552984520789559789228130304, "purpose": "\U0001f600 \u00e2"}
    assert_problem(api.post("/api/v1/operations", body, **{"Idempotency-Key": "k-1"}), 422, "invalid_value")
    assert counts() == before
