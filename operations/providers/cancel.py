"""Sending the documented cancel request to a provider (used by human decisions and agent cancels)."""

from __future__ import annotations

import json
from dataclasses import dataclass

from operations.infrastructure.redaction import redact_bytes, scrub
from operations.models import Operation
from operations.polling.states import MISSING, describe_state, extract
from operations.providers import http
from operations.providers.origins import expand
from operations.providers.targets import DestinationRefused, check_destination
from operations.selectors import job_watched_elsewhere
from operations.vocabulary import CancelState

WATCHED_ELSEWHERE = "not sent: another live operation watches this job"


@dataclass(frozen=True)
class CancelResult:
    state: CancelState
    http_status: int | None = None
    provider_state: str | None = None
    provider_request_id: str = ""
    detail: str = ""

    @property
    def confirmed(self) -> bool:
        return self.state is CancelState.CONFIRMED

    def as_record(self) -> dict[str, object]:
        return {
            "state": str(self.state),
            "http_status": self.http_status,
            "provider_state": self.provider_state,
            "provider_request_id": self.provider_request_id,
            "detail": self.detail,
        }


def send_provider_cancel(*, operation: Operation) -> CancelResult:
    """Send the profile's cancel request once and say what the provider made of it.

    The job counts as cancelled only when the provider answers 2xx with a state from the profile's
    cancelled set; "accepted" or "cancelling" is only forwarded, and the job stays watched. Nothing
    is sent while another live operation watches the job: the cancel goes out with the account's
    one credential and would end that watch's job too; nor where the profile may not send
    (its credential not bound to the cancel URL's origin, or no public address without one).
    """
    profile = operation.provider
    if not profile.has_cancel:
        return CancelResult(state=CancelState.NOT_DOCUMENTED, detail=f"{profile.slug} documents no cancel request")
    if job_watched_elsewhere(operation=operation):
        return CancelResult(state=CancelState.NOT_FORWARDED, detail=WATCHED_ELSEWHERE)
    url = expand(profile.cancel_url, operation.provider_job_id)
    try:
        destination = check_destination(credential_env=profile.credential_env, url=url)
    except DestinationRefused as refused:
        # The same rule as the status requests': the credential goes only where the operator bound it.
        return CancelResult(state=CancelState.NOT_ALLOWED, detail=refused.why)
    raw = http.send_to_provider(method=profile.cancel_method, destination=destination, auth_scheme=profile.auth_scheme)
    # What the provider says is kept (on the card, in the audit chain): never a secret it echoed.
    headers = scrub(raw.headers)
    request_id = ""
    if profile.request_id_header:
        request_id = (headers.get(profile.request_id_header.lower()) or ("",))[0][:200]
    if raw.transport_error is not None:
        return CancelResult(
            state=CancelState.FAILED_TO_FORWARD,
            provider_request_id=request_id,
            detail=scrub(raw.transport_detail or raw.transport_error),
        )
    status = raw.http_status
    if status in (405, 501):
        return CancelResult(state=CancelState.NOT_SUPPORTED, http_status=status, provider_request_id=request_id)
    if status is None or not 200 <= status < 300:
        return CancelResult(state=CancelState.FAILED_TO_FORWARD, http_status=status, provider_request_id=request_id)
    provider_state = None
    try:
        body = json.loads(redact_bytes(raw.body or b"null"))
        value = extract(body, profile.state_field)
        provider_state = None if value is MISSING else scrub(describe_state(value))
    except ValueError:
        body = None
    confirmed = provider_state is not None and provider_state in set(profile.cancelled_states)
    return CancelResult(
        state=CancelState.CONFIRMED if confirmed else CancelState.FORWARDED,
        http_status=status,
        provider_state=provider_state,
        provider_request_id=request_id,
    )
