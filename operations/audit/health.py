"""Health checks of the audit log, shown on the system panel.

- the append-only triggers are installed and ENABLE ALWAYS (PostgreSQL), the archive ledger's
  owner-only insert guard among them;
- the runtime database role neither owns the audit tables nor is a superuser - either could drop
  the triggers, leaving only the signed checkpoints to reveal tampering;
- the runtime role may create neither temporary objects nor objects in schema public (or the
  tables' schema): names planted there shadow the real ones for whoever looks them up by name; and
  every pollerdash database function runs with its fixed search path, so none does (PostgreSQL);
- checkpoints are being signed: the newest genuine one is recent, and no signer reports a failed
  verification or checkpoint rows it had to pass over because they do not verify;
- every archive ledger row is recorded in the log itself (operations.audit.ledger);
- pending entries join the Merkle tree promptly (the integration lag).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.utils import timezone

from operations.audit import checkpoints, database, integrate, ledger, witness
from operations.models import ProcessHeartbeat

AUDIT_TABLES = (
    "operations_auditentry",
    "operations_auditcheckpoint",
    "operations_audittreenode",
    "operations_auditcosignature",
    "operations_auditarchive",
)
# Every audit table refuses UPDATE/DELETE and TRUNCATE; the archive ledger also guards its INSERTs.
EXPECTED_TRIGGERS = frozenset(
    [f"{table}_no_change" for table in AUDIT_TABLES]
    + [f"{table}_no_truncate" for table in AUDIT_TABLES]
    + ["operations_auditarchive_owner_only"]
)
# The database functions migration 0037 defines, each with this fixed search path: the temporary
# schema explicitly last, so nothing the caller planted is found by name (docs/DESIGN.md section 8).
PINNED_FUNCTIONS = (
    "pollerdash_audit_append_only()",
    "pollerdash_audit_entry_guard()",
    "pollerdash_audit_archive_guard()",
    "pollerdash_audit_entry_data(bytea)",
    "pollerdash_audit_prune(text,bigint,bigint)",
)
FIXED_SEARCH_PATH = "search_path=pg_catalog, pg_temp"  # as pg_proc.proconfig holds it
SET_SEARCH_PATH = "SET search_path = pg_catalog, pg_temp"  # as the migration says it
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
    return [
        *_database_checks(),
        _checkpoint_check(),
        _checkpoint_rows_check(),
        _ledger_check(),
        _integration_check(),
        *_witness_checks(),
    ]


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
    guarded = database.protection(AUDIT_TABLES)
    if guarded is None:
        return [
            HealthCheck(
                "append-only triggers",
                False,
                # A newcomer meets this first in `make demo`, which runs on SQLite by choice (one file,
                # nothing to install): say so, and what a deployment uses instead.
                "SQLite has no append-only triggers and no roles: whoever can write the database file can "
                "change entries, checkpoints and the archive ledger. SQLite is for trying pollerdash on one "
                "machine (make demo uses it); deployments use PostgreSQL, whose triggers refuse UPDATE, DELETE "
                "and TRUNCATE on the audit tables and whose roles keep the archive ledger the owner's "
                "(docs/deployment.md)",
            )
        ]
    checks: list[HealthCheck] = []
    triggers, rows = guarded.triggers, guarded.owners
    armed = set(triggers) >= EXPECTED_TRIGGERS and all(triggers[name] == "A" for name in EXPECTED_TRIGGERS)
    checks.append(
        HealthCheck(
            "append-only triggers",
            armed,
            "UPDATE, DELETE and TRUNCATE are refused, and only the owner adds to the archive ledger (ENABLE ALWAYS)"
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
    return [*checks, *_runtime_role_checks(), _function_check()]


def _runtime_role_checks() -> list[HealthCheck]:
    role = database.runtime_role()
    if role is None:
        return []
    # A superuser may do anything; the owner checks above already say to run as another role.
    superuser = " (it is a superuser: run pollerdash as the application role)" if role.superuser else ""
    if role.temporary:
        temporary = HealthCheck(
            "temporary objects",
            False,
            f"the runtime role {role.name} may create temporary tables and functions in {role.database}, which "
            "come first when its session looks a table up by name; pollerdash's functions look nothing up that "
            f"way, but take the means away: REVOKE TEMPORARY ON DATABASE {role.database} FROM PUBLIC (and from "
            f"{role.name} if granted to it; docs/deployment.md){superuser}",
        )
    else:
        temporary = HealthCheck(
            "temporary objects", True, f"the runtime role {role.name} may not create temporary objects"
        )
    if role.creates_in:
        revokes = "; ".join(f"REVOKE CREATE ON SCHEMA {schema} FROM PUBLIC" for schema in role.creates_in)
        schemas = HealthCheck(
            "schema CREATE",
            False,
            f"the runtime role {role.name} may create objects in schema {', '.join(role.creates_in)}, where another "
            f"role's session (the owner's, running the archive) may find them by name: {revokes} (and from "
            f"{role.name} if granted to it; docs/deployment.md){superuser}",
        )
    else:
        schemas = HealthCheck(
            "schema CREATE",
            True,
            f"the runtime role {role.name} may not create objects in pollerdash's schema or public",
        )
    return [temporary, schemas]


def _function_check() -> HealthCheck:
    functions = database.function_settings()
    if functions is None:
        return HealthCheck("function search_path", True, "SQLite has no database functions")
    missing = [name for name in PINNED_FUNCTIONS if name not in functions]
    loose = sorted(name for name, config in functions.items() if FIXED_SEARCH_PATH not in config)
    problems = []
    if missing:
        problems.append(f"missing: {', '.join(missing)} (run manage.py migrate as the owner)")
    if loose:
        problems.append(
            f"without {SET_SEARCH_PATH}: {', '.join(loose)} - it looks names up through "
            "its caller's search path, where the runtime role can plant them (manage.py migrate as the owner sets it)"
        )
    if problems:
        return HealthCheck("function search_path", False, "; ".join(problems))
    return HealthCheck(
        "function search_path",
        True,
        f"every pollerdash database function ({len(functions)}) runs with {SET_SEARCH_PATH}",
    )


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
    try:
        keys = checkpoints.trusted_keys()
    except checkpoints.CheckpointError:
        keys = []  # then only what needs no key is checked (operations.audit.genuine)
    try:
        newest = checkpoints.latest_genuine_checkpoint(keys=keys)
    except checkpoints.CheckpointError as exc:
        return HealthCheck("audit checkpoints", False, str(exc))
    if newest is None:
        return HealthCheck(
            "audit checkpoints", False, "no checkpoint signed yet: run the signer (manage.py audit_checkpoint --loop)"
        )
    age = (now - newest.signed_at).total_seconds()
    ok = age <= STALE_INTERVALS * interval.total_seconds()
    message = f"newest checkpoint signed {int(age)} s ago, covering {newest.size} entries"
    if not ok:
        message += " - is the signer (manage.py audit_checkpoint --loop) running?"
    return HealthCheck("audit checkpoints", ok, message)


def _fresh_signer_beats() -> list[ProcessHeartbeat]:
    interval = timedelta(seconds=settings.AUDIT_CHECKPOINT_INTERVAL_S)
    since = timezone.now() - STALE_INTERVALS * interval
    return [
        beat
        for beat in ProcessHeartbeat.objects.filter(kind="signer", last_seen_at__gte=since)
        if isinstance(beat.info, dict)
    ]


def _checkpoint_rows_check() -> HealthCheck:
    """Checkpoint rows the signer passed over because they do not verify: someone who can write the
    database inserted them (operations.audit.genuine). Signing and exports go on without them."""
    for beat in _fresh_signer_beats():
        skipped = beat.info.get("skipped_checkpoints") or []
        if skipped:
            count = beat.info.get("skipped_count") or len(skipped)
            return HealthCheck(
                "audit checkpoint rows",
                False,
                f"{beat.name} passed over {count} checkpoint rows that do not verify (forged?), e.g. "
                f"{str(skipped[0])[:200]} - exports leave them out; find out who wrote them",
            )
    return HealthCheck("audit checkpoint rows", True, "the signer found no checkpoint row that does not verify")


def _ledger_check() -> HealthCheck:
    found = ledger.read(settings.AUDIT_LOG_NAME)
    if found.problems:
        return HealthCheck(
            "audit archive ledger",
            False,
            f"tampering: {'; '.join(found.problems)[:400]} - such a row vouches for nothing and removes nothing",
        )
    archives = len(found.vouched) + len(found.pending)
    return HealthCheck(
        "audit archive ledger",
        True,
        f"{archives} archived ranges, each recorded in the log (audit.archived)"
        if archives
        else "nothing archived yet",
    )
