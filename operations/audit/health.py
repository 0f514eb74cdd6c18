"""Health checks of the audit log, shown on the system panel.

- the append-only triggers are installed and ENABLE ALWAYS (PostgreSQL);
- the runtime database role neither owns the audit tables nor is a superuser - either could drop
  the triggers, leaving only the signed checkpoints to reveal tampering;
- checkpoints are being signed: the newest is recent, and no signer reports a failed verification;
- pending entries join the Merkle tree promptly (the integration lag).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.utils import timezone

from operations.audit import integrate, witness
from operations.models import AuditCheckpoint, ProcessHeartbeat

AUDIT_TABLES = (
    "operations_auditentry",
    "operations_auditcheckpoint",
    "operations_audittreenode",
    "operations_auditcosignature",
)
# The system panel turns red when the newest checkpoint is older than this many intervals.
STALE_INTERVALS = 3
# ...and when the oldest entry awaiting integration is older than this (every dispatcher pass integrates).
INTEGRATION_LAG_WARN_S = 10.0


@dataclass(frozen=True)
class HealthCheck:
    name: str
    ok: bool
    message: str


def audit_protection_checks() -> list[HealthCheck]:
    """Whether the audit log is protected and checkpointed, one line per concern."""
    return [*_database_checks(), _checkpoint_check(), _integration_check(), *_witness_checks()]


def _witness_checks() -> list[HealthCheck]:
    checks = []
    for lag in witness.witness_lags(now=timezone.now()):
        if lag.seconds is None:
            message = f"witness {lag.name} has cosigned nothing yet: run manage.py audit_witness on its host"
        else:
            message = f"witness {lag.name} cosigned size {lag.size} {int(lag.seconds)} s ago"
        if witness.behind(lag):
            message += f" - behind (more than {settings.AUDIT_WITNESS_MAX_LAG_S} s)"
        checks.append(HealthCheck(f"audit witness {lag.name}", not witness.behind(lag), message))
    return checks


def _integration_check() -> HealthCheck:
    lag = integrate.lag()
    seconds = lag.seconds(timezone.now())
    ok = seconds <= INTEGRATION_LAG_WARN_S
    entries = "entry" if lag.pending == 1 else "entries"
    message = f"{lag.pending} {entries} awaiting integration, the oldest for {seconds:.1f} s"
    if not ok:
        message += " - is a dispatcher (or manage.py audit_integrate) running?"
    return HealthCheck("audit integration", ok, message)


def _database_checks() -> list[HealthCheck]:
    if connection.vendor != "postgresql":
        return [
            HealthCheck(
                "append-only triggers",
                False,
                # A newcomer meets this first in `make demo`, which runs on SQLite by choice (one file,
                # nothing to install): say so, and what a deployment uses instead.
                "SQLite has no append-only triggers. SQLite is for trying pollerdash on one machine "
                "(make demo uses it); deployments use PostgreSQL, whose triggers refuse UPDATE, DELETE "
                "and TRUNCATE on the audit tables (docs/deployment.md)",
            )
        ]
    checks: list[HealthCheck] = []
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_get_userbyid(c.relowner), current_user, "
            "(SELECT rolsuper FROM pg_roles WHERE rolname = current_user) "
            "FROM pg_class c WHERE c.relname = ANY(%s) AND c.relnamespace = to_regnamespace(current_schema())",
            [list(AUDIT_TABLES)],
        )
        rows = cursor.fetchall()
        cursor.execute(
            "SELECT tgname, tgenabled FROM pg_trigger WHERE tgrelid IN "
            "(SELECT oid FROM pg_class WHERE relname = ANY(%s) AND relnamespace = to_regnamespace(current_schema())) "
            "AND NOT tgisinternal",
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


def _checkpoint_check() -> HealthCheck:
    now = timezone.now()
    interval = timedelta(seconds=settings.AUDIT_CHECKPOINT_INTERVAL_S)
    failing = [
        beat
        for beat in ProcessHeartbeat.objects.filter(kind="signer", last_seen_at__gte=now - STALE_INTERVALS * interval)
        if isinstance(beat.info, dict) and beat.info.get("ok") is False
    ]
    if failing:
        return HealthCheck(
            "audit checkpoints",
            False,
            f"{failing[0].name} refuses to sign: {str(failing[0].info.get('error'))[:300]}",
        )
    newest = (
        AuditCheckpoint.objects.filter(log=settings.AUDIT_LOG_NAME).order_by("-signed_at").values("size", "signed_at")
    ).first()
    if newest is None:
        return HealthCheck(
            "audit checkpoints", False, "no checkpoint signed yet: run the signer (manage.py audit_checkpoint --loop)"
        )
    age = (now - newest["signed_at"]).total_seconds()
    ok = age <= STALE_INTERVALS * interval.total_seconds()
    message = f"newest checkpoint signed {int(age)} s ago, covering {newest['size']} entries"
    if not ok:
        message += " - is the signer (manage.py audit_checkpoint --loop) running?"
    return HealthCheck("audit checkpoints", ok, message)
