"""Agent identities: bearer tokens (only their SHA-256 is stored) and webhook signing secrets.

A token is shown once, when it is made; pollerdash keeps its hash and a short prefix so an admin
can tell tokens apart and revoke one without ever holding it.
"""

from __future__ import annotations

import base64
import hashlib
import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import timedelta
from functools import cache

from django.db import transaction
from django.utils import timezone

from operations.infrastructure import fastsql
from operations.models import Agent, AgentToken
from operations.vocabulary import ONE_LINE_CONTROL_CHARACTERS

TOKEN_PREFIX = "pdt_"
PREFIX_SHOWN = 12
# Writing last_used_at on every request would turn every GET into a write; a minute is precise
# enough to tell an admin whether a token is still in use.
LAST_USED_RESOLUTION = timedelta(seconds=60)
AGENT_NAME_MAX = 100


@dataclass(frozen=True)
class IssuedToken:
    agent: Agent
    token: str
    # The webhook signing secret, only when the agent was created by this call.
    webhook_secret: str | None
    created_agent: bool


def token_sha256(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def new_webhook_secret() -> str:
    """A Standard Webhooks secret: whsec_ + base64 of 32 random bytes."""
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode()


def agent_token_issue(*, name: str) -> IssuedToken:
    """Create (or reuse) the agent NAME and issue a new bearer token for it."""
    name = name.strip()
    if not name or len(name) > AGENT_NAME_MAX or ONE_LINE_CONTROL_CHARACTERS.search(name):
        raise ValueError(f"agent names are 1-{AGENT_NAME_MAX} printable characters")
    token = TOKEN_PREFIX + secrets.token_urlsafe(32)
    with transaction.atomic():
        agent, created = Agent.objects.get_or_create(name=name, defaults={"webhook_secret": new_webhook_secret()})
        AgentToken.objects.create(agent=agent, token_sha256=token_sha256(token), prefix=token[:PREFIX_SHOWN])
    return IssuedToken(
        agent=agent, token=token, webhook_secret=agent.webhook_secret if created else None, created_agent=created
    )


def bearer_token(authorization: str) -> str | None:
    """The token of an `Authorization: Bearer <token>` header value, or None for any other value."""
    scheme, _, token = authorization.partition(" ")
    if scheme.lower() != "bearer" or not token.strip():
        return None
    return token.strip()


# The token check's own columns, first in every statement authenticated_sql makes.
TOKEN_COLUMNS = 4


def authenticated_sql(*, columns: str = "", joins: str = "") -> str:
    """The token check's statement, with more `columns` from more (LEFT) `joins` on the agent `a`:
    a read for the agent that comes with its token costs no second round trip."""
    token, agent = fastsql.table(AgentToken), fastsql.table(Agent)
    more = f", {columns}" if columns else ""
    return (
        f"SELECT t.id, t.last_used_at, a.id, a.name{more} FROM {token} t JOIN {agent} a ON a.id = t.agent_id"
        f"{' ' + joins if joins else ''} WHERE t.token_sha256 = %s AND t.revoked_at IS NULL"
    )


_token_sql = cache(authenticated_sql)


def agent_authenticate_with(*, token: str, sql: str, params: Sequence[object]) -> tuple[Agent, tuple] | None:
    """`agent_authenticate` with the statement `sql` (from `authenticated_sql`; `params` are its
    joins', the token's hash follows): the agent and the row's other columns, or None."""
    if not token.startswith(TOKEN_PREFIX) or len(token) > 200:
        return None
    row = fastsql.fetchone(sql, [*params, token_sha256(token)], prepare=True)
    if row is None:
        return None
    used = fastsql.instance(AgentToken, ("id", "last_used_at"), row[:2])
    now = timezone.now()
    if used.last_used_at is None or now - used.last_used_at > LAST_USED_RESOLUTION:
        AgentToken.objects.filter(pk=used.pk).update(last_used_at=now)
    return fastsql.instance(Agent, ("id", "name"), row[2:TOKEN_COLUMNS]), tuple(row[TOKEN_COLUMNS:])


def agent_authenticate(*, token: str) -> Agent | None:
    """The agent a bearer token belongs to (its id and name loaded), or None for an unknown or
    revoked token. Every API and MCP request asks this, so it is one plain statement
    (operations/infrastructure/fastsql.py), not the ORM's."""
    found = agent_authenticate_with(token=token, sql=_token_sql(), params=())
    return None if found is None else found[0]
