"""Start-up checks of what the domain will do with stored configuration (`manage.py check`, and every
command at start: the dispatcher, the workers, `migrate`): a stored profile whose requests the
workers would refuse is named with its field and variable, so a deployment that lacks
PROVIDER_CREDENTIAL_ORIGINS (after an upgrade) hears it at once, not one card per operation."""

from __future__ import annotations

from django.core.checks import CheckMessage, Error, Warning, register
from django.db import DatabaseError

HINT = (
    "Its operations stop with a card “Destination not allowed” and nothing is sent to the provider. Bind the "
    "credential in the environment of every pollerdash process, PROVIDER_CREDENTIAL_ORIGINS="
    "NAME=https://api.provider.example[,origin…][;NAME2=…] (docs/DESIGN.md section 2), or correct the profile."
)


@register("pollerdash")
def provider_destinations(**_: object) -> list[CheckMessage]:
    # Imported here: start-up loads no more than every process needs (docs/architecture.md).
    from operations.models import ProviderProfile
    from operations.providers.targets import binding_problem, destination_problem

    try:
        rows = list(ProviderProfile.objects.values_list("slug", "credential_env", "status_url", "cancel_url"))
    except DatabaseError:
        return []  # not migrated yet: no profile is stored
    found: list[CheckMessage] = []
    for slug, credential_env, status_url, cancel_url in rows:
        unbound = binding_problem(credential_env=credential_env)
        if unbound is not None:
            found.append(Warning(f"profile {slug}: credential_env: {unbound}", hint=HINT, id="pollerdash.W201"))
            continue
        for field, url in (("status_url", status_url), ("cancel_url", cancel_url)):
            problem = destination_problem(credential_env=credential_env, url=url) if url else None
            if problem is not None:
                found.append(Warning(f"profile {slug}: {field}: {problem}", hint=HINT, id="pollerdash.W202"))
    return found


POOLER_HINT = (
    "Behind PgBouncer's transaction pooling each transaction may run on another server connection, "
    "so pollerdash sends no session setting of its own: set it on the role, ALTER ROLE <user> SET "
    "lock_timeout = '10s' (or PgBouncer's connect_query). docs/deployment.md, \"Topology\"."
)


@register("pollerdash")
def transaction_pooling(**_: object) -> list[CheckMessage]:
    """DATABASE_POOL_MODE=transaction: refuse a connection option PgBouncer would refuse or lose,
    and say when the 10 s lock wait pollerdash sets on a direct connection is missing."""
    from django.conf import settings
    from django.db import connection

    if settings.DATABASE_POOL_MODE != "transaction":
        return []
    startup = settings.DATABASES["default"]["OPTIONS"].get("options")
    if startup:
        return [
            Error(
                f"DATABASE_URL options={startup!r}: a session start-up parameter, which PgBouncer in transaction "
                "pooling refuses (unsupported startup parameter) or would keep on one server connection only",
                hint=POOLER_HINT,
                id="pollerdash.E210",
            )
        ]
    try:
        with connection.cursor() as cursor:
            cursor.execute("SHOW lock_timeout")
            (lock_timeout,) = cursor.fetchone()
    except DatabaseError:
        return []  # the database is away: the process says so when it needs it
    if lock_timeout in ("0", "0ms"):
        return [
            Warning(
                "lock_timeout is 0 on the database's connections: a stuck lock holder would pile every "
                "writer up behind it instead of failing them after 10 s",
                hint=POOLER_HINT,
                id="pollerdash.W211",
            )
        ]
    return []
