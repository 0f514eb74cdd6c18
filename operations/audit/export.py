"""Audit exports for incident review: one JSONL file the offline verifier checks (docs/DESIGN.md section 8).

    lines = stream_export(operation_id="op_...")        # signs the closing checkpoint, plans, then
    for line in lines: ...                               # yields complete LF-terminated lines

Layout: a header line, then segments of the chain, then the closing checkpoint. A segment runs
from seq 1 (or from right after a signed checkpoint, whose line opens the segment) to a signed
checkpoint, with every entry body verbatim and, after each entry that a checkpoint covers, the
newest checkpoint of that size. So every entry in the file sits between two signatures and none
of them can be changed, dropped or reordered unseen.

- full export (no filter): the whole chain, seq 1 to the closing checkpoint;
- `since` / `until` (since <= at < until): one contiguous segment around the selected entries;
- `operation_id`: for each of its entries, the segment between the checkpoints around it
  (merged when they touch) - bounded by ~2 checkpoint intervals of log per entry.

`stream_export` does its database set-up eagerly - it signs (or picks) the closing checkpoint and
plans the segments - so a view can turn an ExportError into a page before any byte is sent; the
lines themselves are produced lazily in chunks, in bounded memory whatever the log size.
Under ASGI wrap the iterator with `as_async_lines` so Django does not buffer it whole.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass
from datetime import datetime

from django.db.models import Max, Min

from operations.audit import checkpoints
from operations.audit import verify as av
from operations.models import AuditCheckpoint, AuditEntry

CHUNK = 2000


class ExportError(Exception):
    """The export cannot be made (bad window, nothing selected, no checkpoint): nothing was sent."""


@dataclass(frozen=True)
class ExportPlan:
    log: str
    scope: str
    operation_id: str | None
    closing: AuditCheckpoint
    segments: tuple[tuple[int, int], ...]  # (first seq, last seq), both inclusive
    prev_of_first: str | None

    def header(self) -> dict[str, object]:
        return {
            "format": av.EXPORT_FORMAT,
            "log": self.log,
            "scope": self.scope,
            "operation_id": self.operation_id,
            "exported_at": av.format_time(self.closing.signed_at),
            "first_seq": self.segments[0][0] if self.segments else None,
            "last_seq": self.closing.size,
            "prev_of_first": self.prev_of_first,
            **av.HEADER_CONSTANTS,
        }


def stream_export(
    *, operation_id: str | None = None, since: datetime | None = None, until: datetime | None = None
) -> Iterator[bytes]:
    """Sign the closing checkpoint, plan the segments, and return an iterator of complete lines.

    Raises ExportError (or checkpoints.CheckpointError when nothing can be signed) before
    anything is produced."""
    plan = plan_export(operation_id=operation_id, since=since, until=until)
    return _lines(plan)


def plan_export(
    *, operation_id: str | None = None, since: datetime | None = None, until: datetime | None = None
) -> ExportPlan:
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise ExportError(f"{name} must be a time with a time zone")
    if since is not None and until is not None and since >= until:
        raise ExportError("since must be earlier than until")
    closing = checkpoints.checkpoint_for_export()
    log = closing.log
    entries = AuditEntry.objects.filter(log=log, seq__lte=closing.size)
    if since is not None:
        entries = entries.filter(at__gte=since)
    if until is not None:
        entries = entries.filter(at__lt=until)
    if operation_id is not None:
        seqs = list(entries.filter(operation_id=operation_id).order_by("seq").values_list("seq", flat=True))
        if not seqs:
            raise ExportError(f"no audit entries of {operation_id} in that window up to the latest checkpoint")
        scope = "operation"
    elif since is not None or until is not None:
        bounds = entries.aggregate(first=Min("seq"), last=Max("seq"))
        seqs = [] if bounds["first"] is None else [bounds["first"], bounds["last"]]
        scope = "range"
    else:
        seqs = [1, closing.size] if closing.size else []
        scope = "full"
    segments = _segments(log=log, closing=closing, seqs=seqs, contiguous=scope != "operation")
    prev = None
    if segments:
        prev = AuditEntry.objects.filter(log=log, seq=segments[0][0]).values_list("prev_hash", flat=True).first()
    return ExportPlan(log, scope, operation_id, closing, segments, prev)


def _segments(*, log: str, closing: AuditCheckpoint, seqs: list[int], contiguous: bool) -> tuple[tuple[int, int], ...]:
    """For each selected seq, the stretch between the checkpoints around it; merged when touching."""
    signed = AuditCheckpoint.objects.filter(log=log, pk__lte=closing.pk, size__lte=closing.size)
    segments: list[tuple[int, int]] = []
    for seq in seqs:
        if segments and seq <= segments[-1][1]:
            continue
        before = signed.filter(size__lt=seq).aggregate(size=Max("size"))["size"] or 0
        after = signed.filter(size__gte=seq).aggregate(size=Min("size"))["size"]
        lo, hi = before + 1, after if after is not None else closing.size
        if segments and (contiguous or lo <= segments[-1][1] + 1):
            segments[-1] = (segments[-1][0], hi)
        else:
            segments.append((lo, hi))
    return tuple(segments)


def _lines(plan: ExportPlan) -> Iterator[bytes]:
    yield av.header_line(plan.header())
    for lo, hi in plan.segments:
        if lo > 1:
            opening = _newest_per_size(plan, lo - 1, lo - 1)
            if not opening:
                raise ExportError(f"the checkpoint of size {lo - 1} vanished during the export")
            yield av.checkpoint_line(opening[lo - 1])
        yield from _segment_lines(plan, lo, hi)
    if not plan.segments or plan.segments[-1][1] < plan.closing.size:
        yield av.checkpoint_line(plan.closing.note)


def _segment_lines(plan: ExportPlan, lo: int, hi: int) -> Iterator[bytes]:
    start = lo
    while start <= hi:
        end = min(hi, start + CHUNK - 1)
        notes = _newest_per_size(plan, start, end)
        rows = AuditEntry.objects.filter(log=plan.log, seq__gte=start, seq__lte=end).order_by("seq")
        for seq, body in list(rows.values_list("seq", "body")):
            yield checkpoints.stored_bytes(body) + b"\n"
            note = notes.get(seq)
            if note is not None:
                yield av.checkpoint_line(note)
        start = end + 1


def _newest_per_size(plan: ExportPlan, first: int, last: int) -> dict[int, str]:
    """The newest checkpoint note of each size in [first, last], signed no later than the closing one."""
    newest = (
        AuditCheckpoint.objects.filter(log=plan.log, size__gte=first, size__lte=last, pk__lte=plan.closing.pk)
        .values("size")
        .annotate(last_pk=Max("pk"))
        .values_list("last_pk", flat=True)
    )
    return dict(AuditCheckpoint.objects.filter(pk__in=list(newest)).values_list("size", "note"))


async def as_async_lines(lines: Iterator[bytes], *, batch: int = 512) -> AsyncIterator[bytes]:
    """Stream a line iterator from ASGI without buffering it: batches are pulled in the thread
    that owns the request's database connection."""
    from asgiref.sync import sync_to_async

    def pull() -> list[bytes]:
        out = []
        for line in lines:
            out.append(line)
            if len(out) >= batch:
                break
        return out

    while True:
        chunk = await sync_to_async(pull, thread_sensitive=True)()
        if not chunk:
            return
        for line in chunk:
            yield line
