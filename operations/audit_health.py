"""Health checks of the audit log's database protections, shown on the system panel."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import connection

AUDIT_TABLES = ("operations_auditentry", "operations_auditcheckpoint")


@dataclass(frozen=True)
class HealthCheck:
    name: str
    ok: bool
    message: str


def audit_protection_checks() -> list[HealthCheck]:
    """Whether the append-only triggers are armed and whether the runtime role could drop them."""
    if connection.vendor != "postgresql":
        return [
            HealthCheck(
                "append-only triggers",
                False,
                "SQLite has no append-only triggers: use PostgreSQL for a protected audit log",
            )
        ]
    checks: list[HealthCheck] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_userbyid(c.relowner), current_user, "
            "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user) "
            "FROM pg_class c WHERE c.relname = ANY(%s)",
            [list(AUDIT_TABLES)],
        )
        rows = cursor.fetchall()
        cursor.execute(
            "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid IN "
            "(SELECT oid FROM pg_class WHERE relname = ANY(%s)) AND NOT tgisinternal",
            [list(AUDIT_TABLES)],
        )
        triggers = dict(cursor.fetchall())
    armed = len(triggers) == 2 * len(AUDIT_TABLES) and all(state == "A" for state in triggers.values())
    checks.append(
        HealthCheck(
            "append-only triggers",
            armed,
            "UPDATE, DELETE and TRUNCATE are refused (ENABLE ALWAYS)"
            if armed
            else f"triggers missing or not ENABLE ALWAYS: {sorted(triggers.items())}",
        )
    )
    for table, owner, current, superuser in rows:
        if superuser:
            checks.append(
                HealthCheck(
                    f"{table} owner",
                    False,
                    f"the runtime role {current} is a superuser and can drop the triggers; run pollerdash as a "
                    "role that neither owns the audit tables nor is superuser",
                )
            )
        elif owner == current:
            checks.append(
                HealthCheck(
                    f"{table} owner",
                    False,
                    f"the runtime role {current} owns {table} and can drop its triggers; "
                    "transfer ownership to a separate role",
                )
            )
        else:
            checks.append(HealthCheck(f"{table} owner", True, f"owned by {owner}, not by the runtime role"))
    return checks
