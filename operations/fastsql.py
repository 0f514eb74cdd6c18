"""Plain SQL for the few statements every poll runs, with Django's own value adaptation.

The ORM's query compiler costs about half a millisecond of CPU per statement on this class of
machine, as much as the round trip itself, and a poll runs a dozen statements (bench/controller.py
measures it). The hot path therefore writes its statements directly, while still letting each
model field adapt its values for the backend (JSON, time zones on SQLite), so the same SQL runs
on PostgreSQL and SQLite. Everything off the hot path uses the ORM.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from functools import cache
from typing import Any, cast

from django.db import connection
from django.db.models import Field, Model


@cache
def table(model: type[Model]) -> str:
    return connection.ops.quote_name(model._meta.db_table)


def _field(model: type[Model], name: str) -> Field[Any, Any]:
    # Every name passed here is one of the model's own columns, never a reverse relation.
    return cast("Field[Any, Any]", model._meta.get_field(name))


@cache
def column(model: type[Model], name: str) -> str:
    return connection.ops.quote_name(_field(model, name).column)


def prep(model: type[Model], name: str, value: object) -> object:
    """The value as this backend stores it in that field (Django's get_db_prep_save)."""
    return _field(model, name).get_db_prep_save(value, connection)


def assignments(model: type[Model], values: Mapping[str, object]) -> tuple[str, list[object]]:
    """`col = %s, ...` and its parameters for an UPDATE's SET list."""
    parts, params = [], []
    for name, value in values.items():
        parts.append(f"{column(model, name)} = %s")
        params.append(prep(model, name, value))
    return ", ".join(parts), params


def execute(sql: str, params: Sequence[Any]) -> int:
    """Run one statement; the number of rows it changed."""
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.rowcount


def fetchone(sql: str, params: Sequence[Any]) -> tuple[Any, ...] | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()
