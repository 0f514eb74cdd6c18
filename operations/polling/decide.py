"""Turn one observed provider response into one decision (docs/DESIGN.md section 5).

`decide` is pure: the operation's facts, the observation, and an RNG in; a Decision out. The
service in operations/polls/controller.py does the I/O around it in the order of section 4. Reading the
body is `body.py`, what a readable body says is `interpret.py`, when to look again is `waits.py`.
"""

from __future__ import annotations

import random

from operations.polling.body import Body
from operations.polling.interpret import interpret_body
from operations.polling.model import Bounds, Decision, Observation, Policy
from operations.polling.outcomes import escalate
from operations.polling.waits import Reading, transport_failure
from operations.vocabulary import Reason

BODY_TOO_LARGE = "body_too_large"
INVALID_CREDENTIAL = "invalid_credential"
DESTINATION_NOT_ALLOWED = "destination_not_allowed"


def decide(*, policy: Policy, bounds: Bounds, observation: Observation, rng: random.Random) -> Decision:
    """The decision for one response, following docs/DESIGN.md section 5 row by row."""
    obs = observation
    reading = Reading(policy=policy, bounds=bounds, obs=obs, rng=rng)
    if obs.transport_error is not None and obs.transport_error != BODY_TOO_LARGE:
        return _not_answered(reading=reading)
    code = obs.http_status or 0
    if 200 <= code < 300:
        body = Body(obs.body) if obs.transport_error is None else Body.too_large(obs.transport_detail)
        if body.problem is not None:
            return _invalid_body(reading=reading, what=body.problem)
        return interpret_body(reading=reading, body=body.value)
    if code == 404:
        return _not_found(reading=reading)
    if code == 429:
        return transport_failure(
            reading=reading,
            interpreted="rate_limited",
            what="429 Too Many Requests",
            spent_reason=Reason.RATE_LIMITED,
            rate_limited=True,
        )
    if code >= 500:
        return transport_failure(
            reading=reading,
            interpreted="server_error",
            what=f"provider answered {code}",
            spent_reason=Reason.PROVIDER_FAILURE,
        )
    return _refused(obs=obs, code=code)


def unreadable(*, policy: Policy, bounds: Bounds, observation: Observation, rng: random.Random, what: str) -> Decision:
    """The decision for an answer that could not be interpreted at all: an invalid body, like one
    the parser refuses. `observation` carries only what is safe to read (no headers, no body)."""
    return _invalid_body(reading=Reading(policy=policy, bounds=bounds, obs=observation, rng=rng), what=what)


def _invalid_body(*, reading: Reading, what: str) -> Decision:
    return transport_failure(
        reading=reading, interpreted="invalid_body", what=what, spent_reason=Reason.INTEGRATION_FAILURE
    )


def _not_answered(*, reading: Reading) -> Decision:
    """No response came: the request was not sent, or the transport failed."""
    obs = reading.obs
    if obs.transport_error == INVALID_CREDENTIAL:
        # Nothing was sent, and sending again would not help until someone fixes the credential:
        # the same card as a refused one, so it offers a retry once the credential changed.
        return escalate(
            Reason.AUTHORIZATION_DENIED, INVALID_CREDENTIAL, obs.transport_detail or "the credential cannot be sent"
        )
    if obs.transport_error == DESTINATION_NOT_ALLOWED:
        # The last check before a credential leaves refused it (the poll checks first, so only a
        # destination made around that check gets here): nothing was sent.
        return escalate(
            Reason.DESTINATION_NOT_ALLOWED, DESTINATION_NOT_ALLOWED, obs.transport_detail or DESTINATION_NOT_ALLOWED
        )
    return transport_failure(
        reading=reading,
        interpreted="transport_error",
        what=f"{obs.transport_error}{': ' + obs.transport_detail if obs.transport_detail else ''}",
        spent_reason=Reason.PROVIDER_FAILURE,
    )


def _not_found(*, reading: Reading) -> Decision:
    """A 404 soon after registration may be the provider's own lag; later, it does not know the job."""
    policy = reading.policy
    age_s = (reading.obs.received_at - reading.bounds.registered_at).total_seconds()
    if age_s < policy.not_found_grace_s:
        return transport_failure(
            reading=reading,
            interpreted="not_found",
            what=f"404 {age_s:.0f} s after registration (within the {policy.not_found_grace_s:g} s grace window)",
            spent_reason=Reason.INTEGRATION_FAILURE,
        )
    return escalate(
        Reason.INTEGRATION_FAILURE,
        "not_found",
        f"provider does not know the job: 404 {age_s:.0f} s after registration, past the "
        f"{policy.not_found_grace_s:g} s grace window",
    )


def _refused(*, obs: Observation, code: int) -> Decision:
    """An answer that waiting will not change: a redirect, a refused credential, another 4xx."""
    if 300 <= code < 400:
        location = (obs.header("location") or ("",))[0][:200]
        return escalate(
            Reason.INTEGRATION_FAILURE,
            "redirect",
            f"provider answered {code} redirect{' to ' + location if location else ''}; redirects are never followed",
        )
    if code in (401, 403):
        return escalate(
            Reason.AUTHORIZATION_DENIED,
            "denied",
            f"provider refused the credential with {code}; retrying the same credential would not help",
        )
    return escalate(
        Reason.INTEGRATION_FAILURE,
        "client_error",
        f"provider rejected the status request with {code}",
    )
