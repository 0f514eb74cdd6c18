"""Quantiles of a duration over rows, computed where the database can (docs/architecture.md:
database-specific SQL lives in one module per concern)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db import connection
from django.db.models import Model

from operations.infrastructure.fastsql import column, fetchall, fetchone, instance, table


def seconds_quantiles(
    model: type[Model], *, start: str, end: str, where: str, params: Sequence[Any], quantiles: Sequence[float]
) -> tuple[int, list[float], float | None]:
    """How many rows match `where`, the `quantiles` of `end - start` in seconds over them (linear
    interpolation between closest ranks, PostgreSQL's percentile_cont) and the largest.

    PostgreSQL computes them; SQLite has no percentile, so its rows are read and ranked here.
    """
    if connection.vendor == "postgresql":
        seconds = f"EXTRACT(EPOCH FROM {column(model, end)} - {column(model, start)})::float8"
        row = fetchone(
            f"SELECT count(*), percentile_cont(%s) WITHIN GROUP (ORDER BY s), max(s) FROM ("
            f"SELECT {seconds} AS s FROM {table(model)} WHERE {where}) AS recent",
            [list(quantiles), *params],
        )
        assert row is not None  # an aggregate's one row
        count, values, largest = row
        return count, list(values or []), largest
    names = (start, end)
    rows = fetchall(f"SELECT {column(model, start)}, {column(model, end)} FROM {table(model)} WHERE {where}", params)
    ordered = sorted(
        (later - earlier).total_seconds()
        for earlier, later in (
            (getattr(obj, start), getattr(obj, end)) for obj in (instance(model, names, row) for row in rows)
        )
    )
    if not ordered:
        return 0, [], None
    return len(ordered), [_percentile(ordered, q) for q in quantiles], ordered[-1]


def _percentile(ordered: list[float], q: float) -> float:
    """Linear interpolation between closest ranks, as PostgreSQL's percentile_cont."""
    position = q * (len(ordered) - 1)
    low = int(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)
