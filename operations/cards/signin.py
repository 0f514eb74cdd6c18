"""How the person deciding proved who they are, and when: the sign-in a decision is taken under.

The dashboard's session holds one (accounts/signins.py writes it at every sign-in, password or
OpenID Connect, first or fresh); every Decision keeps it (`Decision.authentication`) and so does
its audit entry, so "cancelled by alice" also says "signed in with the identity provider at
09:12". The record is plain JSON with every key present:

    {"method": "password" | "oidc", "at": "2026-12-01T09:12:00.000000Z" | null,
     "issuer": <OIDC issuer or null>, "subject": <OIDC subject or null>}

`at` is null when the identity provider did not say when the person authenticated (an ID token
without `auth_time`): such a sign-in is never fresh, however recently its token was issued.

Pure: no clock and no Django; `is_fresh` gets `now`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

PASSWORD = "password"
OIDC = "oidc"
METHODS = frozenset({PASSWORD, OIDC})
# A sign-in "in the future" by more than this is a wrong clock or a forged record, not a fresh one.
CLOCK_SKEW = timedelta(seconds=60)
_MAX_TEXT = 300


@dataclass(frozen=True)
class SignIn:
    method: str  # PASSWORD or OIDC
    # When the person authenticated (OIDC: the ID token's auth_time), timezone-aware; None when the
    # provider did not say.
    at: datetime | None
    issuer: str = ""  # OIDC only: the identity provider
    subject: str = ""  # OIDC only: the person's stable id at that provider

    def as_record(self) -> dict[str, str | None]:
        """The JSON kept in the session, on the decision and in its audit entry."""
        is_oidc = self.method == OIDC
        return {
            "method": self.method,
            # The audit chain's one time format (operations.audit.entries.iso).
            "at": None if self.at is None else self.at.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
            "issuer": self.issuer if is_oidc else None,
            "subject": self.subject if is_oidc else None,
        }

    @classmethod
    def from_record(cls, record: object) -> SignIn | None:
        """The sign-in a stored record describes, or None for anything that is not one."""
        if not isinstance(record, dict) or record.get("method") not in METHODS:
            return None
        if "at" not in record or (record["at"] is None and record["method"] != OIDC):
            return None  # only a provider may leave the time out; a password sign-in has one
        at: datetime | None = None
        if record["at"] is not None:
            try:
                at = datetime.fromisoformat(str(record["at"]))
            except ValueError:
                return None
            if at.tzinfo is None:
                return None
        issuer, subject = record.get("issuer") or "", record.get("subject") or ""
        if not isinstance(issuer, str) or not isinstance(subject, str):
            return None
        return cls(method=record["method"], at=at, issuer=issuer[:_MAX_TEXT], subject=subject[:_MAX_TEXT])


def is_fresh(sign_in: SignIn | None, *, now: datetime, max_age: timedelta) -> bool:
    """Signed in within the last `max_age` (and not implausibly later than `now`); a sign-in whose
    time is unknown never is."""
    if sign_in is None or sign_in.at is None:
        return False
    return now - max_age <= sign_in.at <= now + CLOCK_SKEW
