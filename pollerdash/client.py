"""pollerdash agent client: the JSON API of docs/DESIGN.md section 9, with httpx and nothing else.

Copy this one file into an agent's code base; it imports no Django and no pollerdash module.

    from pollerdash.client import PollerdashClient

    with PollerdashClient("https://pollerdash.example", token) as pd:
        op = pd.register("acme-export", "exp_71c", purpose="weekly report")
        outcome = pd.await_operation(op["id"], max_wait_s=600)
        if outcome.outcome == "succeeded":
            use(outcome.operation["result"])
            pd.ack(outcome.operation_id)
        # failed / needs_attention / timed_out: report it, keep outcome.operation_id for later

Every result carries the operation id; `timed_out` and `needs_attention` are not errors, they
mean "not done yet" (keep the id; `list_open()` finds it again on the next run).

`WebhookVerifier` checks completion callbacks (Standard Webhooks) before you trust them.
"""

from __future__ import annotations

import base64
import hmac
import math
import re
import time
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any, Literal

import httpx

__all__ = ["AwaitResult", "PollerdashClient", "PollerdashError", "WebhookVerifier", "WebhookVerificationFailed"]

TERMINAL_STATUSES = frozenset({"succeeded", "partially_succeeded", "failed", "cancelled", "expired", "closed"})
SUCCESS_STATUSES = frozenset({"succeeded", "partially_succeeded"})
WAIT_MAX_S = 50
USER_AGENT = "pollerdash-client/1"

Outcome = Literal["succeeded", "failed", "needs_attention", "timed_out"]


class PollerdashError(Exception):
    """The API refused a call; `code` is the problem's stable code (e.g. operation_not_found)."""

    def __init__(self, status: int, problem: Mapping[str, Any]) -> None:
        self.status = status
        self.problem = dict(problem)
        self.code = str(problem.get("code") or f"http_{status}")
        self.retry_after_s = problem.get("retry_after_s")
        super().__init__(f"{status} {self.code}: {problem.get('detail', '')}")

    @property
    def transient(self) -> bool:
        return self.status >= 500 or self.status == 429 or self.code == "idempotency_key_in_flight"


@dataclass(frozen=True)
class AwaitResult:
    """What `await_operation` found. `outcome` is one of succeeded / failed / needs_attention / timed_out.

    - succeeded: done with a result (`status` says whether partially_succeeded);
    - failed: done without a result (failed, cancelled, expired, closed; see operation["error"]);
    - needs_attention: not done, a human is deciding: do not resubmit, check again later;
    - timed_out: not done within max_wait_s: the job is still being watched.
    """

    outcome: Outcome
    operation_id: str
    status: str
    operation: dict[str, Any]
    waited_s: float

    @property
    def done(self) -> bool:
        return self.outcome in ("succeeded", "failed")


class PollerdashClient:
    def __init__(
        self,
        base_url: str,
        token: str,
        *,
        timeout_s: float = 15.0,
        transport: httpx.BaseTransport | None = None,
    ) -> None:
        self._http = httpx.Client(
            base_url=base_url.rstrip("/"),
            headers={"Authorization": f"Bearer {token}", "User-Agent": USER_AGENT, "Accept": "application/json"},
            # A wait may legitimately take up to WAIT_MAX_S before the first byte.
            timeout=httpx.Timeout(timeout_s, read=WAIT_MAX_S + timeout_s),
            follow_redirects=False,
            transport=transport,
        )

    def close(self) -> None:
        self._http.close()

    def __enter__(self) -> PollerdashClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # --- calls -----------------------------------------------------------------------------------------

    def _call(self, method: str, path: str, **kwargs: Any) -> tuple[int, dict[str, Any]]:
        response = self._http.request(method, path, **kwargs)
        try:
            body = response.json()
        except ValueError:
            body = {"code": f"http_{response.status_code}", "detail": response.text[:200]}
        if response.status_code >= 400:
            if "retry-after" in response.headers and response.headers["retry-after"].isdigit():
                body.setdefault("retry_after_s", int(response.headers["retry-after"]))
            raise PollerdashError(response.status_code, body)
        return response.status_code, body

    def register(
        self,
        provider: str,
        provider_job_id: str,
        *,
        purpose: str | None = None,
        deadline: datetime | str | None = None,
        business_deadline: datetime | str | None = None,
        max_status_requests: int | None = None,
        request_fingerprint: str | None = None,
        callback_url: str | None = None,
        metadata: Mapping[str, str] | None = None,
        idempotency_key: str | None = None,
    ) -> dict[str, Any]:
        """Ask pollerdash to watch a provider job. Returns the Operation object (not done yet).

        Registering the same job again while it is open returns the same operation, so retrying
        after a lost answer is safe; an Idempotency-Key makes that explicit.
        """
        body: dict[str, Any] = {"provider": provider, "provider_job_id": provider_job_id}
        optional = {
            "purpose": purpose,
            "deadline": _time(deadline),
            "business_deadline": _time(business_deadline),
            "max_status_requests": max_status_requests,
            "request_fingerprint": request_fingerprint,
            "metadata": dict(metadata) if metadata is not None else None,
        }
        body.update({key: value for key, value in optional.items() if value is not None})
        if callback_url is not None:
            body["callback"] = {"url": callback_url}
        headers = {"Idempotency-Key": idempotency_key} if idempotency_key else {}
        return self._call("POST", "/api/v1/operations", json=body, headers=headers)[1]

    def get(self, operation_id: str) -> dict[str, Any]:
        return self._call("GET", f"/api/v1/operations/{_segment(operation_id)}")[1]

    def wait(self, operation_id: str, timeout_s: int = 25) -> dict[str, Any]:
        """One bounded wait (at most 50 s): returns the wait_result object, early when done or needs_attention."""
        return self._call(
            "GET", f"/api/v1/operations/{_segment(operation_id)}/wait", params={"timeout_s": str(int(timeout_s))}
        )[1]

    def list_open(self, *, limit: int = 50, cursor: str | None = None) -> dict[str, Any]:
        """One page of your open operations: not done, or done and not acknowledged."""
        params = {"view": "open", "limit": str(int(limit))}
        if cursor:
            params["cursor"] = cursor
        return self._call("GET", "/api/v1/operations", params=params)[1]

    def iter_open(self, *, page_size: int = 100) -> Iterator[dict[str, Any]]:
        """Every open operation, across pages (call at the start of every run)."""
        cursor = None
        while True:
            page = self.list_open(limit=page_size, cursor=cursor)
            yield from page["data"]
            cursor = page.get("next_cursor")
            if not cursor:
                return

    def ack(self, operation_id: str) -> dict[str, Any]:
        """Acknowledge a done operation (it leaves the open list). Idempotent."""
        return self._call("POST", f"/api/v1/operations/{_segment(operation_id)}/ack")[1]

    def cancel(self, operation_id: str, reason: str | None = None) -> dict[str, Any]:
        """Stop watching (closed, error.code watch_cancelled); the provider gets a cancel where it has one."""
        body = {"reason": reason} if reason else None
        return self._call("POST", f"/api/v1/operations/{_segment(operation_id)}/cancel", json=body)[1]

    def await_operation(self, operation_id: str, max_wait_s: float, *, wait_s: int = WAIT_MAX_S) -> AwaitResult:
        """Wait until the operation is done or a human must decide, for at most max_wait_s.

        Loops on the server's bounded wait; transient trouble (connection errors, 5xx, 429) is
        retried within the same budget. Never raises for "not done": that is `timed_out`.
        """
        started = time.monotonic()
        deadline = started + max(0.0, max_wait_s)
        last: dict[str, Any] | None = None
        backoff = 0.5
        while True:
            remaining = deadline - time.monotonic()
            try:
                if remaining < 1:
                    last = self.get(operation_id)
                    return self._result(operation_id, last, started)
                result = self.wait(operation_id, timeout_s=max(1, min(wait_s, math.floor(remaining))))
                last = result["operation"]
                backoff = 0.5
            except PollerdashError as exc:
                if not exc.transient:
                    raise
                pause = float(exc.retry_after_s if exc.retry_after_s is not None else backoff)
            except httpx.TransportError:
                pause = backoff
            else:
                if last["done"] or last["status"] == "needs_attention":
                    return self._result(operation_id, last, started)
                continue
            backoff = min(backoff * 2, 10.0)
            if time.monotonic() + pause >= deadline:
                if last is None:
                    last = {"id": operation_id, "status": "unknown", "done": False}
                return self._result(operation_id, last, started)
            time.sleep(pause)

    @staticmethod
    def _result(operation_id: str, operation: dict[str, Any], started: float) -> AwaitResult:
        status = str(operation.get("status", "unknown"))
        outcome: Outcome
        if operation.get("done"):
            outcome = "succeeded" if status in SUCCESS_STATUSES else "failed"
        elif status == "needs_attention":
            outcome = "needs_attention"
        else:
            outcome = "timed_out"
        return AwaitResult(
            outcome=outcome,
            operation_id=operation_id,
            status=status,
            operation=operation,
            waited_s=round(time.monotonic() - started, 3),
        )


def _segment(operation_id: str) -> str:
    if not re.fullmatch(r"op_[0-9A-Za-z]{1,64}", operation_id):
        raise ValueError(f"not an operation id: {operation_id[:40]!r}")
    return operation_id


def _time(value: datetime | str | None) -> str | None:
    if value is None or isinstance(value, str):
        return value
    if value.tzinfo is None:
        raise ValueError("deadlines need a time zone (e.g. datetime.now(UTC))")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


# --- receiving callbacks ------------------------------------------------------------------------------


class WebhookVerificationFailed(Exception):
    pass


_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
_TIMESTAMP = re.compile(r"[0-9]{1,12}")
_SIGNATURE = re.compile(r"v1,[A-Za-z0-9+/]{43}=")


class WebhookVerifier:
    """Checks a pollerdash callback (Standard Webhooks) over the raw body, strictly.

        verifier = WebhookVerifier(webhook_secret)          # whsec_... from create_agent_token
        event = verifier.verify(raw_body, request.headers)  # raises WebhookVerificationFailed

    Then dedupe on headers["webhook-id"] (a UNIQUE column; a repeat is a 200 no-op) and drop
    events whose data.sequence is not above the last one you saw for that operation.
    """

    MAX_SIGNATURES = 10

    def __init__(self, secret: str, *, tolerance_s: int = 300) -> None:
        from standardwebhooks import Webhook

        self._webhook = Webhook(secret)
        self.tolerance_s = tolerance_s

    def verify(self, body: bytes, headers: Mapping[str, str], *, now: float | None = None) -> dict[str, Any]:
        import json

        lowered = {str(key).lower(): str(value) for key, value in headers.items()}
        msg_id = lowered.get("webhook-id", "")
        timestamp = lowered.get("webhook-timestamp", "")
        signatures = lowered.get("webhook-signature", "")
        if not (msg_id and timestamp and signatures):
            raise WebhookVerificationFailed("missing webhook-id, webhook-timestamp or webhook-signature")
        if not _ID.fullmatch(msg_id):
            raise WebhookVerificationFailed("malformed webhook-id")
        if not _TIMESTAMP.fullmatch(timestamp):
            raise WebhookVerificationFailed("webhook-timestamp must be whole seconds in ASCII digits")
        if abs((time.time() if now is None else now) - int(timestamp)) > self.tolerance_s:
            raise WebhookVerificationFailed("webhook-timestamp outside the tolerance window")
        entries = signatures.split(" ")
        if len(entries) > self.MAX_SIGNATURES:
            raise WebhookVerificationFailed("too many signatures")
        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError:
            raise WebhookVerificationFailed("body is not UTF-8") from None
        sent_at = datetime.fromtimestamp(int(timestamp), tz=UTC)
        expected = base64.b64decode(self._webhook.sign(msg_id, sent_at, text).split(",", 1)[1])
        for entry in entries:
            if _SIGNATURE.fullmatch(entry) and hmac.compare_digest(base64.b64decode(entry[3:]), expected):
                return json.loads(text)
        raise WebhookVerificationFailed("no valid signature")
