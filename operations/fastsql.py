"""Plain SQL for the few statements every poll runs, with Django's own value adaptation.

The ORM's query compiler costs about half a millisecond of CPU per statement on this class of
machine, as much as the round trip itself, and a poll runs a dozen statements (bench/controller.py
measures it). The hot path therefore writes its statements directly, while still letting each
model field adapt its values for the backend (JSON, time zones on SQLite), so the same SQL runs
on PostgreSQL and SQLite. Everything off the hot path uses the ORM.

On PostgreSQL these statements are also bound on the server and prepared (`_cursor`): Django's
default cursor binds parameters in Python, re-parsing any statement of more than 50 parameters
on every call, and the server then parses and plans it again. A statement over many rows
passes one array per column (`unnest`), so its text, and its prepared plan, is the same for
every group size.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from functools import cache
from typing import Any, cast

from django.db import connection
# Typing: the class is defined only when psycopg 3 is installed (always, here), which the stubs cannot know.
from django.db.backends.postgresql.base import ServerBindingCursor  # type: ignore[attr-defined]
from django.db.backends.utils import CursorWrapper
from django.db.models import BooleanField, CharField, Field, FloatField, IntegerField, Model

# Statements a connection keeps prepared once seen this often (psycopg's `prepare_threshold`; the
# server then skips parsing and planning them). Only this module's cursors prepare statements.
PREPARE_AFTER = 2


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
)


@cache
def _stored_as_is(model: type[Model], name: str) -> frozenset[type]:
    field = _field(model, name)
    return next((types for kind, types in _AS_IS if isinstance(field, kind)), frozenset())


def prep(model: type[Model], name: str, value: object) -> object:
    """The value as this backend stores it in that field (Django's get_db_prep_save)."""
    # Exact types only: a subclass (an enum member, say) goes through Django's conversion.
    if type(value) in _stored_as_is(model, name):
        return value
    return _field(model, name).get_db_prep_save(value, connection)


def assignments(model: type[Model], values: Mapping[str, object]) -> tuple[str, list[object]]:
    """`col = %s, ...` and its parameters for an UPDATE's SET list."""
    parts, params = [], []
    for name, value in values.items():
        parts.append(f"{column(model, name)} = %s")
        params.append(prep(model, name, value))
    return ", ".join(parts), params


@contextmanager
def _cursor() -> Iterator[CursorWrapper]:
    """PostgreSQL: a cursor that binds on the server and prepares repeated statements.

    Django's own checks come first (the health check after a request boundary, the connection),
    and errors come out as Django's, so callers and the reconnect logic see no difference.
    """
    if connection.vendor != "postgresql":
        with connection.cursor() as cursor:
            yield cursor
        return
    connection.close_if_health_check_failed()
    connection.ensure_connection()
    raw = connection.connection
    if raw.prepare_threshold != PREPARE_AFTER:
        # Django turns prepared statements off (for external poolers); our statements want them.
        raw.prepare_threshold = PREPARE_AFTER
    with connection.wrap_database_errors:
        bound = ServerBindingCursor(raw)
    wrapped = connection.make_debug_cursor(bound) if connection.queries_logged else connection.make_cursor(bound)
    with wrapped:
        yield wrapped


def execute(sql: str, params: Sequence[Any]) -> int:
    """Run one statement; the number of rows it changed."""
    with _cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def fetchone(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    with _cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def fetchall(sql: str, params: Sequence[Any]) -> list[tuple[Any, ...]]:
    with _cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchall()


def array_type(model: type[Model], name: str) -> str:
    """The PostgreSQL array type of a column, for `unnest(%s::type[])`."""
    return f"{_field(model, name).db_type(connection)}[]"


def update_rows(
    model: type[Model],
    *,
    keys: Sequence[str],
    names: Sequence[str],
    rows: Sequence[Sequence[Any]],
    where: str = "",
    params: Sequence[Any] = (),
) -> list[object]:
    """PostgreSQL: one UPDATE of many rows, each matched on `keys` and given its own `names` values.

    Each row holds the key values then the new values, prepared (`prep`). `where` may add a
    condition on the table (alias `o`) with its parameters after the rows'. Returns the primary
    keys of the rows changed. The rows travel as one array per column, so the statement is the
    same for any number of rows.
    """
    columns = [*keys, *names]
    aliases = [f"v{index}" for index in range(len(columns))]
    arrays = ", ".join(f"%s::{array_type(model, name)}" for name in columns)
    sets = ", ".join(
        f"{column(model, name)} = v.{alias}" for name, alias in zip(names, aliases[len(keys) :], strict=True)
    )
    match = " AND ".join(
        f"o.{column(model, key)} = v.{alias}" for key, alias in zip(keys, aliases[: len(keys)], strict=True)
    )
    sql = (
        f"UPDATE {table(model)} AS o SET {sets} FROM unnest({arrays}) AS v({', '.join(aliases)}) "
        f"WHERE {match}{where} RETURNING o.{connection.ops.quote_name(model._meta.pk.column)}"
    )
    by_column = [list(values) for values in zip(*rows, strict=True)] if rows else [[] for _ in columns]
    return [row[0] for row in fetchall(sql, [*by_column, *params])]


def lock_rows(model: type[Model], pks: Sequence[Any]) -> None:
    """PostgreSQL: lock these rows in primary-key order before a statement that writes several.

    A multi-row UPDATE locks rows in whatever order its plan meets them; two of them over
    overlapping rows (a group's outcomes, an account pause) could then wait on each other. Taking
    the locks in one global order first rules that out.
    """
    if connection.vendor != "postgresql" or len(pks) < 2:
        return
    pk = connection.ops.quote_name(model._meta.pk.column)
    fetchall(
        f"SELECT 1 FROM {table(model)} WHERE {pk} = ANY(%s::{array_type(model, model._meta.pk.name)}) "
        f"ORDER BY {pk} FOR UPDATE",
        [list(pks)],
    )
