"""Plain SQL for the few statements every poll runs, with Django's own value adaptation.

The ORM's query compiler costs about half a millisecond of CPU per statement on this class of
machine, as much as the round trip itself, and a poll runs a dozen statements (bench/controller.py
measures it). The hot path therefore writes its statements directly, while still letting each
model field adapt its values for the backend (JSON, time zones on SQLite), so the same SQL runs
on PostgreSQL and SQLite. Everything off the hot path uses the ORM.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from datetime import datetime
from functools import cache
from typing import Any, TypeVar, cast

from django.db import DEFAULT_DB_ALIAS, connection, connections
from django.db.backends.base.base import BaseDatabaseWrapper
from django.db.models import BooleanField, CharField, DateTimeField, Field, FloatField, IntegerField, Model
from django.db.models.base import ModelState
from django.db.models.signals import post_init, pre_init

_M = TypeVar("_M", bound=Model)


@cache
def table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    # Every name passed here is one of the model's own columns, never a reverse relation.
    return cast("Field[Any, Any]", model._meta.get_field(name))


@cache
def column(model: type[Model], name: str) -> str:
    return connection.ops.quote_name(_field(model, name).column)


# Values that a field stores as they are on every backend, by exact type: prep passes them
# through without Django's conversion chain (a group's statements prepare hundreds of values).
_AS_IS: tuple[tuple[type[Field[Any, Any]], frozenset[type]], ...] = (
    (CharField, frozenset({str, type(None)})),
    (BooleanField, frozenset({bool, type(None)})),
    (IntegerField, frozenset({int, type(None)})),
    (FloatField, frozenset({float, type(None)})),
    (DateTimeField, frozenset({type(None)})),
)


@cache
def _stored_as_is(model: type[Model], name: str) -> frozenset[type]:
    field = _field(model, name)
    return next((types for kind, types in _AS_IS if isinstance(field, kind)), frozenset())


@cache
def _aware_as_is(model: type[Model], name: str) -> bool:
    # psycopg stores an aware datetime itself; SQLite needs Django's conversion to text.
    return connection.vendor == "postgresql" and isinstance(_field(model, name), DateTimeField)


def prep(model: type[Model], name: str, value: object) -> object:
    """The value as this backend stores it in that field (Django's get_db_prep_save)."""
    # Exact types only: a subclass (an enum member, say) goes through Django's conversion.
    if type(value) in _stored_as_is(model, name):
        return value
    if type(value) is datetime and value.tzinfo is not None and _aware_as_is(model, name):
        return value
    return _field(model, name).get_db_prep_save(value, connection)


def assignments(model: type[Model], values: Mapping[str, object]) -> tuple[str, list[object]]:
    """`col = %s, ...` and its parameters for an UPDATE's SET list."""
    parts, params = [], []
    for name, value in values.items():
        parts.append(f"{column(model, name)} = %s")
        params.append(prep(model, name, value))
    return ", ".join(parts), params


@cache
def _converters(model: type[Model], names: tuple[str, ...]) -> tuple[tuple[int, Any, tuple[Any, ...]], ...]:
    # Per column, what Django's query compiler applies to a value the backend returned (JSON
    # text, SQLite's datetimes); most columns need nothing.
    found = []
    for index, name in enumerate(names):
        col = _field(model, name).cached_col
        converters = (*connection.ops.get_db_converters(col), *col.get_db_converters(connection))
        if converters:
            found.append((index, col, converters))
    return tuple(found)


def instance(model: type[_M], names: tuple[str, ...], row: Sequence[Any]) -> _M:
    """A model instance from a plain row of the columns `names` (attnames, in the row's order),
    converted as the ORM would; the other columns are left deferred, as `only()` would."""
    values = list(row)
    for index, col, functions in _converters(model, names):
        for function in functions:
            values[index] = function(values[index], col, connection)
    if pre_init.has_listeners(model) or post_init.has_listeners(model):
        return model.from_db(connection.alias, names, values)
    # What Model.from_db builds, without Model.__init__'s walk over every field (a poll loads
    # several operations): the values are set as __init__ sets them, straight into the instance's
    # dict (the model's columns have no data descriptors besides a foreign key's id, whose only
    # work on assignment is to drop a cached related object a new instance cannot have yet).
    obj = model.__new__(model)
    state = obj._state = ModelState()
    state.adding, state.db = False, connection.alias
    obj.__dict__.update(zip(names, values, strict=True))
    return obj


@contextmanager
def bound_cursor(alias: str = DEFAULT_DB_ALIAS) -> Iterator[Any]:
    """A cursor for one plain statement. On PostgreSQL, unless something watches the queries
    (DEBUG, CaptureQueriesContext, an execute wrapper), it is psycopg's own Cursor: parameters
    travel apart from the SQL, and Django's cursor wrapper is skipped.

    Django's cursor is psycopg's ClientCursor, which writes every parameter into the SQL as a
    literal (bytes escaped to hex, lists spelled out as array text, each quoted) for the server
    to parse back; with Django's wrapper around it, a one-row SELECT costs about 65 us more client
    CPU than with psycopg's Cursor (226 against 131 us, this machine), and a group's statements,
    each with a dozen arrays of eight values, several times that. Every statement of the poll
    path, the dispatcher's claim and the task queue comes here. Errors still come as Django's
    exception classes, and a statement in a transaction that must roll back is refused as Django
    refuses it."""
    db = connections[alias]
    if db.vendor != "postgresql" or db.queries_logged or db.execute_wrappers:
        with db.cursor() as cursor:
            yield cursor
        return
    # What db.cursor() and its wrapper check before a statement.
    db.close_if_health_check_failed()
    db.ensure_connection()
    db.validate_thread_sharing()
    db.validate_no_broken_transaction()
    with db.wrap_database_errors:
        yield _bound_cursor(db)


def fetchall_bound(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    """Run one statement and fetch its rows (`bound_cursor`)."""
    with bound_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def _bound_cursor(db: BaseDatabaseWrapper) -> Any:
    """psycopg's Cursor on the connection's current psycopg connection, made once per connection:
    making one (its adapters map, its transformer) costs about as much client CPU as the rest of
    the call. Each thread has its own connection wrapper, so each its own cursor."""
    cursor = getattr(db, "_fastsql_cursor", None)
    if cursor is None or cursor.closed or cursor.connection is not db.connection:
        # Imported here: on SQLite (the demo's default) every process would pay ~0.2 s to load it.
        import psycopg

        cursor = psycopg.Cursor(db.connection)
        # Typing: a cached cursor kept on Django's connection wrapper, which declares no such field.
        db._fastsql_cursor = cursor  # type: ignore[attr-defined]
    return cursor


def execute(sql: str, params: Sequence[Any]) -> int:
    """Run one statement; the number of rows it changed."""
    with bound_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def fetchall(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with bound_cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def fetchone(sql: str, params: Sequence[Any], *, prepare: bool = False) -> tuple[Any, ...] | None:
    """One row. `prepare`: a statement every agent request runs, on unique keys only (so the plan
    PostgreSQL keeps for it is the one it would choose each time): prepared once per connection
    where the connection allows it (`pollerdash.env`: session pooling, not PgBouncer's transaction
    pooling), which saves its planning on every later call — the token check joined with the
    operation cost 0.65 ms a call unprepared and 0.28 ms prepared (bench/mcp_profile.py)."""
    with bound_cursor() as cursor:
        if prepare and cursor is getattr(connection, "_fastsql_cursor", None):
            _execute_prepared(cursor, sql, params)
        else:
            cursor.execute(sql, params)
        return cursor.fetchone()


# PostgreSQL's "cached plan must not change result type": a migration changed the type of a
# column a prepared statement returns, on another connection (psycopg forgets its statements
# itself only after an ALTER on its own connection).
_PLAN_CHANGED = "0A000"


def _execute_prepared(cursor: Any, sql: str, params: Sequence[Any]) -> None:
    try:
        cursor.execute(sql, params, prepare=True)
    except Exception as exc:
        if getattr(exc, "sqlstate", None) != _PLAN_CHANGED or not connection.get_autocommit():
            raise
        # Outside a transaction nothing is lost: forget this connection's prepared statements
        # (psycopg clears its own list when it sees DEALLOCATE ALL) and plan the statement anew,
        # instead of failing every later request on this connection until a restart.
        cursor.execute("DEALLOCATE ALL")
        cursor.execute(sql, params, prepare=True)


@cache
def type_of(model: type[Model], name: str) -> str:
    """The column's database type (`varchar(32)`), for a cast."""
    return str(_field(model, name).db_type(connection))


def array_of(model: type[Model], name: str) -> str:
    """PostgreSQL: the array type of a column (`varchar(32)[]`), for a statement over unnest()."""
    return f"{type_of(model, name)}[]"


def _postgres() -> bool:
    return connection.vendor == "postgresql"


def lock_clause(*, share: bool = False, skip_locked: bool = False) -> str:
    """What ends a SELECT that locks its rows: ` FOR UPDATE` (` FOR SHARE`, ` SKIP LOCKED`) on
    PostgreSQL; nothing on SQLite, which has no row locks (its IMMEDIATE transactions hold the
    database's one write lock, so a writer already excludes every other)."""
    if not _postgres():
        return ""
    return (" FOR SHARE" if share else " FOR UPDATE") + (" SKIP LOCKED" if skip_locked else "")


def named_lock(name: str) -> None:
    """Serialise this transaction with every other that takes the same name, until it ends: a
    PostgreSQL advisory transaction lock; SQLite's IMMEDIATE transactions are serial already."""
    if _postgres():
        with connection.cursor() as cursor:
            cursor.execute("SELECT pg_advisory_xact_lock(hashtext(%s))", [name])


def rows_in(model: type[Model], names: Sequence[str], rows: Sequence[Sequence[Any]]) -> tuple[str, list[object]]:
    """`(a, b) IN (...)` for the rows whose columns `names` hold one of `rows` (values prepared).

    PostgreSQL: one array per column (unnest), so the statement's text is the same for any number
    of rows (`update_rows` says why); SQLite: a list of row values.
    """
    columns = ", ".join(column(model, name) for name in names)
    if _postgres():
        arrays = ", ".join(f"%s::{array_of(model, name)}" for name in names)
        return f"({columns}) IN (SELECT * FROM unnest({arrays}))", [
            [row[index] for row in rows] for index in range(len(names))
        ]
    one = f"({', '.join(['%s'] * len(names))})"
    return f"({columns}) IN ({', '.join([one] * len(rows))})", [value for row in rows for value in row]


def in_key_order(model: type[Model], pks: Sequence[Any]) -> tuple[str, list[object]]:
    """` AND <pk> IN (...)`: a condition that locks the rows `pks` in primary-key order within the
    statement that writes them (PostgreSQL, `locking_subquery`); nothing on SQLite (no row locks)."""
    if not _postgres():
        return "", []
    return f" AND {connection.ops.quote_name(model._meta.pk.column)} IN ({locking_subquery(model)})", [sorted(pks)]


def insert_rows(
    model: type[Model],
    *,
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    constants: Mapping[str, object],
    returning: Sequence[str],
) -> list[tuple[Any, ...]]:
    """One INSERT of many rows: each row holds the values of `names`, and every row the same
    `constants` (all prepared, `prep`); the `returning` columns of each row inserted.

    PostgreSQL: one array per column (unnest), a fixed statement text for any number of rows;
    SQLite: a list of rows.
    """
    columns = ", ".join(column(model, name) for name in (*names, *constants))
    answer = f"RETURNING {', '.join(column(model, name) for name in returning)}"
    if _postgres():
        arrays = ", ".join(f"%s::{array_of(model, name)}" for name in names)
        fixed = ", ".join(f"%s::{type_of(model, name)}" for name in constants)
        sql = f"INSERT INTO {table(model)} ({columns}) SELECT v.*, {fixed} FROM unnest({arrays}) AS v {answer}"
        params = [*constants.values(), *[[row[index] for row in rows] for index in range(len(names))]]
    else:
        one = f"({', '.join(['%s'] * (len(names) + len(constants)))})"
        sql = f"INSERT INTO {table(model)} ({columns}) VALUES {', '.join([one] * len(rows))} {answer}"
        params = [value for row in rows for value in (*row, *constants.values())]
    return fetchall(sql, params)


def insert_if_written(update: str, params: Sequence[Any], *, model: type[Model], values: Mapping[str, object]) -> Any:
    """Run `update` (of one row) and, only if it changed its row, insert one row of `model` with
    `values` (prepared). The new row's key; None when the update changed nothing.

    PostgreSQL: one round trip, the update inside the insert's WITH; SQLite: two statements.
    """
    columns = ", ".join(column(model, name) for name in values)
    if _postgres():
        casts = ", ".join(f"%s::{type_of(model, name)}" for name in values)
        row = fetchone(
            f"WITH written AS ({update} RETURNING id) INSERT INTO {table(model)} ({columns}) "
            f"SELECT {casts} FROM written RETURNING id",
            [*params, *values.values()],
        )
        return None if row is None else row[0]
    if execute(update, params) != 1:
        return None
    row = fetchone(
        f"INSERT INTO {table(model)} ({columns}) VALUES ({', '.join(['%s'] * len(values))}) RETURNING id",
        list(values.values()),
    )
    return None if row is None else row[0]


def update_if_written(first: str, params: Sequence[Any], *, then: str, then_params: Sequence[Any]) -> bool:
    """Run `first` (an UPDATE of one row) and, only if it changed its row, `then` (an UPDATE whose
    WHERE clause comes last, so it can be extended); whether `first` changed its row.

    PostgreSQL: one round trip, both in one WITH. Whether the row was written is `first`'s to say:
    `then`'s own count would report a changed row as unchanged were `then` to match nothing.
    """
    if _postgres():
        return bool(
            fetchall(
                f"WITH won AS ({first} RETURNING id), answered AS ({then} AND EXISTS (SELECT 1 FROM won)) "
                "SELECT id FROM won",
                [*params, *then_params],
            )
        )
    if not execute(first, params):
        return False
    execute(then, then_params)
    return True


def update_rows(
    model: type[Model],
    *,
    keys: Sequence[str],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    increments: Sequence[str] = (),
    where: str = "",
    params: Sequence[Any] = (),
    lock: bool = False,
) -> list[object]:
    """One UPDATE of many rows, each matched on `keys` and given its own `names` values, and its
    `increments` columns moved by one.

    Each row holds the key values then the new values, prepared (`prep`). `where` may add a
    condition on the table (alias `o`) with its parameters after the rows'. Returns the primary
    keys of the rows changed. On PostgreSQL the rows travel as one array per column (unnest), so
    the statement's text is the same for any number of rows: psycopg parses it once per process
    and PostgreSQL parses a short statement instead of a VALUES list of hundreds of parameters.
    `lock`: the statement first locks the rows in primary-key order (what `lock_rows` does,
    without its own round trip); the first key must then be the primary key. SQLite, which
    serialises writers anyway, runs one statement per row.
    """
    columns = [*keys, *names]
    pk = connection.ops.quote_name(model._meta.pk.column)
    moved = [f"{column(model, name)} = o.{column(model, name)} + 1" for name in increments]
    if not _postgres():
        sets = ", ".join([*(f"{column(model, name)} = %s" for name in names), *moved])
        match = " AND ".join(f"o.{column(model, key)} = %s" for key in keys)
        sql = f"UPDATE {table(model)} AS o SET {sets} WHERE {match}{where} RETURNING {pk}"
        changed = []
        for row in rows:
            found = fetchone(sql, [*row[len(keys) :], *row[: len(keys)], *params])
            if found is not None:
                changed.append(found[0])
        return changed
    aliases = [f"v{index}" for index in range(len(columns))]
    arrays = ", ".join(f"%s::{array_of(model, name)}" for name in columns)
    sets = ", ".join(
        [
            *(f"{column(model, name)} = v.{alias}" for name, alias in zip(names, aliases[len(keys) :], strict=True)),
            *moved,
        ]
    )
    match = " AND ".join(
        f"o.{column(model, key)} = v.{alias}" for key, alias in zip(keys, aliases[: len(keys)], strict=True)
    )
    arrays_params = [[row[index] for row in rows] for index in range(len(columns))]
    locked, lock_params = "", []
    if lock:
        locked = f" AND o.{pk} IN ({locking_subquery(model)})"
        lock_params = [sorted(arrays_params[0])]
    sql = (
        f"UPDATE {table(model)} AS o SET {sets} FROM unnest({arrays}) AS v({', '.join(aliases)}) "
        f"WHERE {match}{where}{locked} RETURNING o.{pk}"
    )
    return [row[0] for row in fetchall(sql, [*arrays_params, *params, *lock_params])]


def locking_subquery(model: type[Model]) -> str:
    """PostgreSQL: a subquery locking the rows whose primary keys its one parameter (an array)
    holds, in primary-key order: `lock_rows` inside the statement that writes them.

    LockRows runs above the Sort of a SELECT with ORDER BY and FOR UPDATE, so the rows are locked
    in that order, and the enclosing statement writes only rows it returned, already locked.
    """
    pk = connection.ops.quote_name(model._meta.pk.column)
    keys = f"%s::{array_of(model, model._meta.pk.name)}"
    return f"SELECT {pk} FROM {table(model)} WHERE {pk} = ANY({keys}) ORDER BY {pk} FOR UPDATE"


def lock_rows(model: type[Model], pks: Sequence[Any]) -> None:
    """PostgreSQL: lock these rows in primary-key order before a statement that writes several.

    A multi-row UPDATE locks rows in whatever order its plan meets them; two of them over
    overlapping rows (a group's outcomes, an account pause) could then wait on each other. Taking
    the locks in one global order first rules that out. SQLite has no row locks.
    """
    if not _postgres() or len(pks) < 2:
        return
    pk = connection.ops.quote_name(model._meta.pk.column)
    fetchall(
        f"SELECT 1 FROM {table(model)} WHERE {pk} IN ({', '.join(['%s'] * len(pks))}) ORDER BY {pk} FOR UPDATE",
        list(pks),
    )
