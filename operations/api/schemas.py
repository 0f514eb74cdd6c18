"""Request and response shapes of the agent API (docs/DESIGN.md section 9).

Request models are strict: unknown fields are refused, and no type is coerced (no "5" for 5, no
5.0 for 5, no true for "true"). Range and format rules (lengths, deadlines, callback URLs) live in
the services so the command line and MCP tools apply the same ones. Response models document what
`operations.representation` produces; the API returns those dicts directly.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TIME: dict[str, Any] = {"format": "date-time"}


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True)


class CallbackIn(_Strict):
    url: str = Field(
        description="https URL on a public address (the host:port pairs in CALLBACK_ALLOWED_HOSTS excepted); "
        "receives Standard Webhooks deliveries"
    )


class RegisterIn(_Strict):
    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        json_schema_extra={
            "examples": [
                {"provider": "acme-export", "provider_job_id": "exp_71c", "purpose": "weekly report"},
                {
                    "provider": "acme-export",
                    "provider_job_id": "exp_72d",
                    "deadline": "2030-01-01T00:00:00Z",
                    "metadata": {"run_id": "r-7"},
                },
            ]
        },
    )

    provider: str = Field(description="slug of a configured provider profile (exact, case-sensitive)")
    provider_job_id: str = Field(description="the provider's job id; must match the profile's job_id_pattern")
    purpose: str | None = Field(None, description="up to 280 characters; stored and shown as data only")
    deadline: str | None = Field(
        None, json_schema_extra=TIME, description="RFC 3339 with offset; default from the profile; at most 7 days"
    )
    business_deadline: str | None = Field(
        None, json_schema_extra=TIME, description="when the result stops being useful (RFC 3339 with offset)"
    )
    max_status_requests: int | None = Field(None, description="status-request budget; default from the profile")
    request_fingerprint: str | None = Field(None, description="your own fingerprint of the job request (<= 200)")
    callback: CallbackIn | None = None
    metadata: dict[str, str] | None = Field(None, description="<= 16 keys (<= 40 chars), string values (<= 500)")


class CancelIn(_Strict):
    reason: str | None = Field(None, description="why the watch is cancelled (<= 280 characters)")


class AckIn(_Strict):
    pass


# --- responses -------------------------------------------------------------------------------------


class PollOut(BaseModel):
    count: int
    max: int
    transport_failures: int
    max_transport_failures: int
    last_polled_at: str | None = Field(json_schema_extra=TIME)
    next_poll_at: str | None = Field(json_schema_extra=TIME)


class ProgressOut(BaseModel):
    percent: int | None
    counts: dict[str, int] | None


class ErrorOut(BaseModel):
    code: str
    message: str
    provider_error: Any = Field(description="the provider's own error, verbatim (size-capped)")


class EscalationOut(BaseModel):
    reason: str
    opened_at: str = Field(json_schema_extra=TIME)
    url: str


class CancelOut(BaseModel):
    requested_at: str = Field(json_schema_extra=TIME)
    reason: str | None
    state: str | None = Field(
        description="requested | forwarding | forwarded | confirmed | not_supported | failed_to_forward | "
        "not_documented | not_forwarded (another live watch of the job exists: nothing sent) | not_allowed (the "
        "cancel URL is no destination the profile may send to: nothing sent)"
    )


class LinksOut(BaseModel):
    self_: str = Field(alias="self")
    wait: str
    ack: str
    cancel: str


class OperationOut(BaseModel):
    object: Literal["operation"]
    id: str
    status: str = Field(
        description="pending | running | needs_attention | succeeded | partially_succeeded | failed | cancelled | "
        "expired | closed (may grow: key on `done`)"
    )
    done: bool = Field(description="true exactly when status is terminal")
    agent_hint: str = Field(description='plain sentence; while not done it starts with "NOT DONE."')
    hint_code: str
    provider: str
    provider_job_id: str
    provider_status: str | None
    purpose: str
    created_at: str = Field(json_schema_extra=TIME)
    updated_at: str = Field(json_schema_extra=TIME)
    completed_at: str | None = Field(json_schema_extra=TIME)
    acknowledged_at: str | None = Field(json_schema_extra=TIME)
    deadline: str = Field(json_schema_extra=TIME)
    business_deadline: str | None = Field(json_schema_extra=TIME)
    sequence: int = Field(description="grows on every change you can observe")
    poll: PollOut
    retry_after_s: int | None = Field(description="earliest sensible re-check, seconds; null when done")
    progress: ProgressOut
    result: dict[str, Any] | None
    error: ErrorOut | None
    escalation: EscalationOut | None
    cancel: CancelOut | None
    warnings: list[str]
    metadata: dict[str, str]
    links: LinksOut


class WaitOut(BaseModel):
    object: Literal["wait_result"]
    operation_id: str
    timed_out: bool
    done: bool
    waited_s: int
    requested_timeout_s: int
    applied_timeout_s: int
    operation: OperationOut


class OpenCountsOut(BaseModel):
    open_not_done: int
    needs_attention: int
    done_unacknowledged: int


class ListOut(BaseModel):
    object: Literal["list"]
    view: Literal["open"]
    limit: int
    counts: OpenCountsOut
    data: list[OperationOut]
    next_cursor: str | None
    agent_hint: str


class FieldErrorOut(BaseModel):
    pointer: str
    code: str
    detail: str


class ProblemOut(BaseModel):
    type: str
    title: str
    status: int
    code: str
    detail: str
    instance: str | None = None
    errors: list[FieldErrorOut] | None = None
    operation_id: str | None = None
    operation: OperationOut | None = None


INPUT_MODELS = (RegisterIn, CancelIn, AckIn)
OUTPUT_MODELS = (OperationOut, WaitOut, ListOut, ProblemOut)
