"""What the audit log asks of the database that PostgreSQL and SQLite answer differently, in one place.

PostgreSQL guards the log itself (migrations 0011, 0017, 0019, 0021, 0026, 0037): triggers refuse
UPDATE, DELETE and TRUNCATE, only the archive ledger's owner adds its rows, only the owner of
`pollerdash_audit_prune` removes archived entries, and every one of those functions runs with a
fixed search path, so no name the runtime role plants is looked up; the integrator numbers a batch and stores its
nodes in one statement over arrays each. SQLite has no roles and no triggers: whoever can write
the file can write every table, so every question of a role is answered yes, and the same writes
go through the ORM. The modules that use these (integrate, tree, ledger, archive, health) hold no
backend branch of their own.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from django.db import connection, transaction
from django.db.models import Q

from operations.infrastructure import fastsql
from operations.models import AuditEntry, AuditTreeNode

# A batch proof names thousands of nodes; SQLite parses a chain of ORs as a tree at most 1000
# deep, so they are asked for a few hundred at a time.
SQLITE_NODES_PER_QUERY = 300
NODES_SQL = (
    "SELECT level, index, hash FROM operations_audittreenode WHERE log = %s AND (level, index) IN "
    "(SELECT * FROM unnest(%s::smallint[], %s::bigint[]))"
)


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def lock_tree(log: str) -> int | None:
    """Lock the log's tree row for this transaction (made if missing); its size, or None when
    another integrator has it (PostgreSQL: SKIP LOCKED; SQLite's transactions are serial)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO operations_audittree (log, size, root) VALUES (%s, 0, '') ON CONFLICT (log) DO NOTHING", [log]
        )
        cursor.execute(
            f"SELECT size FROM operations_audittree WHERE log = %s{fastsql.lock_clause(skip_locked=True)}", [log]
        )
        row = cursor.fetchone()
    return None if row is None else int(row[0])


# Every dispatcher pass integrates what the polls since the last one appended, so these two run
# for every poll: on PostgreSQL each is one statement over arrays (no per-row parameters or CASE
# arms to compile), a fraction of the ORM's bulk_update and bulk_create for the dispatcher and
# the server.


def number(numbered: list[tuple[int, int]]) -> None:
    """Give the pending entries (pk, seq) their numbers."""
    if not numbered:
        return
    if not _postgres():
        AuditEntry.objects.bulk_update([AuditEntry(pk=pk, seq=seq) for pk, seq in numbered], ["seq"], batch_size=1000)
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE operations_auditentry AS e SET seq = v.seq "
            "FROM unnest(%s::bigint[], %s::bigint[]) AS v(id, seq) WHERE e.id = v.id",
            [[pk for pk, _ in numbered], [seq for _, seq in numbered]],
        )


def add_nodes(*, log: str, made: list[tuple[int, int, bytes]]) -> None:
    """Store the tree's new complete subtrees (level, index, hash)."""
    if not made:
        return
    if not _postgres():
        AuditTreeNode.objects.bulk_create(
            [AuditTreeNode(log=log, level=level, index=index, hash=digest) for level, index, digest in made],
            batch_size=2000,
        )
        return
    with connection.cursor() as cursor:
        cursor.execute(
            'INSERT INTO operations_audittreenode (log, level, "index", hash) '
            "SELECT %s, * FROM unnest(%s::smallint[], %s::bigint[], %s::bytea[])",
            [log, [level for level, _, _ in made], [index for _, index, _ in made], [h for _, _, h in made]],
        )


def stored_nodes(*, log: str, wanted: Iterable[tuple[int, int]]) -> list[tuple[int, int, bytes]]:
    """The stored (level, index, hash) of those of the nodes `wanted` the log has: one indexed query
    on PostgreSQL, one per SQLITE_NODES_PER_QUERY nodes on SQLite."""
    ordered = sorted(set(wanted))
    if not ordered:
        return []
    if _postgres():
        levels, indexes = zip(*ordered, strict=True)
        return fastsql.fetchall_bound(NODES_SQL, [log, list(levels), list(indexes)])
    rows: list[tuple[int, int, bytes]] = []
    for first in range(0, len(ordered), SQLITE_NODES_PER_QUERY):
        condition = Q()
        for level, index in ordered[first : first + SQLITE_NODES_PER_QUERY]:
            condition |= Q(level=level, index=index)
        rows += AuditTreeNode.objects.filter(condition, log=log).values_list("level", "index", "hash")
    return rows


def may_record() -> tuple[bool, str]:
    """Whether this connection's role may add archive rows, and who it is. On PostgreSQL the
    table's owner (or a superuser) - the trigger of migration 0026 refuses anyone else, so asking
    first spares writing an archive that could not be recorded."""
    if not _postgres():
        return True, "sqlite"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, pg_catalog.pg_get_userbyid(c.relowner), "
            "coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), false) "
            "FROM pg_catalog.pg_class c WHERE c.oid = 'operations_auditarchive'::regclass"
        )
        current, owner, superuser = cursor.fetchone()
    return current == owner or bool(superuser), f"{current} (the ledger's owner is {owner})"


def may_prune() -> tuple[bool, str]:
    """Whether this connection's role may call pollerdash_audit_prune (EXECUTE is its owner's
    alone), and who it is; asked before the archive is read back for nothing."""
    if not _postgres():
        return True, "sqlite"
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, "
            "has_function_privilege(current_user, 'pollerdash_audit_prune(text, bigint, bigint)', 'EXECUTE')"
        )
        current, allowed = cursor.fetchone()
    return bool(allowed), str(current)


def prune(*, log: str, after: int, upto: int) -> int:
    """Remove the entries after..upto (archived and recorded, as the caller checked): on PostgreSQL
    through the guarded function, which checks the archive ledger again; how many went."""
    if not _postgres():
        removed, _ = AuditEntry.objects.filter(log=log, seq__gt=after, seq__lte=upto).delete()
        return removed
    with transaction.atomic(), connection.cursor() as cursor:
        # Typed exactly: with plain integer literals an overload (text, integer, integer) someone
        # created in schema public would be the better match and run as the owner, who calls this.
        cursor.execute("SELECT pollerdash_audit_prune(%s::text, %s::bigint, %s::bigint)", [log, upto, after])
        return int(cursor.fetchone()[0])


@dataclass(frozen=True)
class Protection:
    """What guards the audit tables (PostgreSQL): who owns each, who the runtime role is, whether it
    is a superuser, and their triggers by name with their `tgenabled` state."""

    owners: list[tuple[str, str, str, bool | None]]  # (table, owner, current role, superuser)
    triggers: dict[str, str]


def protection(tables: Iterable[str]) -> Protection | None:
    """The audit tables' owners and triggers; None on SQLite, which has neither."""
    if not _postgres():
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT c.relname, pg_catalog.pg_get_userbyid(c.relowner), current_user, "
            "(SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user) "
            "FROM pg_catalog.pg_class c WHERE c.relname = ANY(%s) "
            "AND c.relnamespace = pg_catalog.to_regnamespace(pg_catalog.current_schema())",
            [list(tables)],
        )
        owners = cursor.fetchall()
        cursor.execute(
            "SELECT tgname, tgenabled FROM pg_catalog.pg_trigger WHERE tgrelid IN "
            "(SELECT oid FROM pg_catalog.pg_class WHERE relname = ANY(%s) "
            "AND relnamespace = pg_catalog.to_regnamespace(pg_catalog.current_schema())) AND NOT tgisinternal",
            [list(tables)],
        )
        triggers = dict(cursor.fetchall())
    return Protection(owners=owners, triggers=triggers)


@dataclass(frozen=True)
class RuntimeRole:
    """What the runtime role may create beyond the tables' rows (PostgreSQL): temporary objects in
    this database, and objects in the tables' schema or in public (the schemas it may CREATE in)."""

    name: str
    database: str
    superuser: bool
    temporary: bool
    creates_in: list[str]


def runtime_role() -> RuntimeRole | None:
    """The runtime role's TEMPORARY and CREATE privileges; None on SQLite, which has no roles.
    Catalogs are named with their schema: a temporary table of this session must not answer."""
    if not _postgres():
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT current_user, pg_catalog.current_database(), "
            "coalesce((SELECT r.rolsuper FROM pg_catalog.pg_roles r WHERE r.rolname = current_user), false), "
            "pg_catalog.has_database_privilege(pg_catalog.current_database(), 'TEMPORARY'), "
            "ARRAY(SELECT n.nspname::text FROM pg_catalog.pg_namespace n "
            "WHERE n.nspname IN (pg_catalog.current_schema(), 'public') "
            "AND pg_catalog.has_schema_privilege(n.oid, 'CREATE') ORDER BY n.nspname)"
        )
        name, database, superuser, temporary, creates_in = cursor.fetchone()
    return RuntimeRole(
        name=name, database=database, superuser=bool(superuser), temporary=bool(temporary), creates_in=creates_in
    )


def function_settings() -> dict[str, list[str]] | None:
    """pollerdash's functions in the tables' schema (signature -> their SET settings, e.g.
    `search_path=pg_catalog, pg_temp`); None on SQLite, which has none."""
    if not _postgres():
        return None
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT p.oid::pg_catalog.regprocedure::text, coalesce(p.proconfig, '{}') FROM pg_catalog.pg_proc p "
            "WHERE p.pronamespace = pg_catalog.to_regnamespace(pg_catalog.current_schema()) "
            "AND p.proname LIKE %s",
            ["pollerdash%"],
        )
        return {signature: list(config) for signature, config in cursor.fetchall()}
