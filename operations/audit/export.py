"""Audit exports for incident review: one JSONL file the offline verifier checks (docs/DESIGN.md section 8).

    lines = stream_export(operation_id="op_...")        # signs the closing checkpoint, plans, then
    for line in lines: ...                               # yields complete LF-terminated lines

A header line, then

- full export (no filter), format `pollerdash-audit-export/2`: every entry body verbatim in `seq`
  order (after the archived ones, if `manage.py archive` removed some: then it opens with
  `{"frontier": ...}`, the tree's right edge at that size, and the header's `from` says the size),
  each checkpoint of a size right after the entry it covers (the newest chain checkpoint, the switch, the newest tree
  checkpoint of that size), a `{"consistency": ...}` proof before each tree checkpoint from the
  one before it, closed by the checkpoint signed at export time;
- operation (`operation_id`) or time window (`since <= at < until`), format
  `pollerdash-audit-export/3`: the newest checkpoint that witnesses cosigned and a consistency
  proof from it (when there is one), the closing checkpoint, then the selected entries verbatim in
  groups of up to BATCH entries, each group followed by one `{"batch": {"size", "seqs", "hashes"}}`:
  the group's seqs as `[first, last]` runs and, in base64, the hashes of the subtrees that with the
  group's leaves recompute the closing root, each shared subtree once (100 entries spread over a
  10,000,000-entry log need about 1,700 hashes, against 2,400 one proof per entry). `version=2`
  writes format 2 instead, for readers with an older verifier: each entry followed by
  `{"inclusion": {"seq", "size", "hashes"}}`, its own RFC 9162 audit path in hex. Nothing of any
  other entry appears but hashes inside proofs. `consistency_from` adds proofs from earlier tree
  sizes to the closing one, for readers who pinned a checkpoint of that size.

`stream_export` does its database set-up eagerly - it signs (or picks) the closing checkpoint and
checks the selection - so a view can turn an ExportError into a page before any byte is sent; the
lines themselves are produced lazily in chunks, in bounded memory whatever the log size.
Under ASGI wrap the iterator with `as_async_lines` so Django does not buffer it whole.
"""

from __future__ import annotations

import base64
from collections.abc import AsyncIterator, Iterator, Sequence
from dataclasses import dataclass, field
from datetime import datetime

from django.db.models import Max, QuerySet

from operations.audit import checkpoints, genuine, ledger, tree, witness
from operations.audit import verify as av
from operations.models import AuditCheckpoint, AuditEntry

CHUNK = 2000
# Entries per batch proof: the verifier holds a group in memory until its proof, and the proof line
# of 512 entries spread thinly over a large log stays well under the verifier's 1 MiB line limit.
BATCH = 512
VERSIONS = (2, 3)


class ExportError(Exception):
    """The export cannot be made (bad window, nothing selected, no checkpoint): nothing was sent."""


@dataclass(frozen=True)
class ExportPlan:
    log: str
    scope: str
    operation_id: str | None
    closing: AuditCheckpoint
    selected: QuerySet[AuditEntry]
    consistency_from: tuple[int, ...] = ()
    start: int = 0  # a full export after an archive: the archived size it continues from
    version: int = 3  # operation and range exports; a full export is always format 2
    # The keys a checkpoint row must verify with to be exported (operations.audit.genuine), and the
    # rows passed over, filled in as the export is produced.
    keys: tuple[av.VerifierKey, ...] = ()
    skipped: list[genuine.Skipped] = field(default_factory=list)

    @property
    def batched(self) -> bool:
        return self.scope != "full" and self.version == 3

    def header(self) -> dict[str, object]:
        return {
            "format": av.EXPORT_FORMAT_V3 if self.batched else av.EXPORT_FORMAT_V2,
            "log": self.log,
            "scope": self.scope,
            "operation_id": self.operation_id,
            "exported_at": av.format_time(self.closing.signed_at),
            "size": self.closing.size,
            "from": self.start,
            **av.HEADER_V2_CONSTANTS,
        }


def stream_export(
    *,
    operation_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    consistency_from: Sequence[int] = (),
    version: int = 3,
    max_entries: int | None = None,
    skipped: list[genuine.Skipped] | None = None,
) -> Iterator[bytes]:
    """Sign the closing checkpoint, check the selection, and return an iterator of complete lines.

    Raises ExportError (or checkpoints.CheckpointError when nothing can be signed) before
    anything is produced; also when a full or time-window export would hold more than
    MAX_ENTRIES entries (the dashboard's limit; an operation's export is never refused for size).
    Checkpoint rows that do not verify are left out and added to `skipped` as they are met."""
    plan = plan_export(
        operation_id=operation_id,
        since=since,
        until=until,
        consistency_from=consistency_from,
        version=version,
        skipped=skipped,
    )
    if max_entries is not None and plan.scope != "operation" and _more_than(plan, max_entries):
        window = " --since T --until T" if plan.scope == "range" else ""
        raise ExportError(
            f"This export holds more than {max_entries:,} entries, more than the dashboard streams: "
            f"run manage.py audit_export{window} -o FILE on the server instead."
        )
    return _full(plan) if plan.scope == "full" else _proven(plan)


def _more_than(plan: ExportPlan, limit: int) -> bool:
    if plan.scope == "full":
        # Integrated entries have every seq from 1 up: a full export's count needs no scan.
        return plan.closing.size - plan.start > limit
    # At most limit + 1 rows are counted, however wide the window.
    return plan.selected[: limit + 1].count() > limit


def plan_export(
    *,
    operation_id: str | None = None,
    since: datetime | None = None,
    until: datetime | None = None,
    consistency_from: Sequence[int] = (),
    version: int = 3,
    skipped: list[genuine.Skipped] | None = None,
) -> ExportPlan:
    if version not in VERSIONS:
        raise ExportError(f"export format {version}: pollerdash writes formats 2 and 3")
    for name, value in (("since", since), ("until", until)):
        if value is not None and value.tzinfo is None:
            raise ExportError(f"{name} must be a time with a time zone")
    if since is not None and until is not None and since >= until:
        raise ExportError("since must be earlier than until")
    skipped = [] if skipped is None else skipped
    closing = checkpoints.checkpoint_for_export(skipped=skipped)
    if not closing.tree:
        raise ExportError("the newest checkpoint is of the version-1 chain: run the signer once (audit_checkpoint)")
    for size in consistency_from:
        if not 0 < size <= closing.size:
            raise ExportError(f"--consistency-from {size}: not a size between 1 and {closing.size}")
    log = closing.log
    entries = AuditEntry.objects.filter(log=log, seq__isnull=False, seq__lte=closing.size)
    if since is not None:
        entries = entries.filter(at__gte=since)
    if until is not None:
        entries = entries.filter(at__lt=until)
    if operation_id is not None:
        entries = entries.filter(operation_id=operation_id)
        scope = "operation"
    elif since is not None or until is not None:
        scope = "range"
    else:
        scope = "full"
    start = ledger.archived_upto(log) if scope == "full" else 0
    if scope == "full":
        entries = entries.filter(seq__gt=start)
    if scope != "full" and not entries.exists():
        what = operation_id or "the window"
        raise ExportError(f"no audit entries of {what} up to the latest checkpoint")
    proofs_from = tuple(sorted(set(consistency_from)))
    keys = tuple(checkpoints.trusted_keys())
    return ExportPlan(
        log, scope, operation_id, closing, entries.order_by("seq"), proofs_from, start, version, keys, skipped
    )


def range_plan(*, closing: AuditCheckpoint, start: int, keys: Sequence[av.VerifierKey]) -> ExportPlan:
    """A full export of entries start+1 .. closing.size: what an archive holds."""
    entries = AuditEntry.objects.filter(log=closing.log, seq__gt=start, seq__lte=closing.size).order_by("seq")
    return ExportPlan(closing.log, "full", None, closing, entries, (), start, keys=tuple(keys))


def full_lines(plan: ExportPlan) -> Iterator[bytes]:
    return _full(plan)


def _chunks(entries: QuerySet[AuditEntry]) -> Iterator[list[tuple[int, bytes]]]:
    after = 0
    while True:
        rows = [
            (seq, checkpoints.stored_bytes(body))
            for seq, body in entries.filter(seq__gt=after).values_list("seq", "body")[:CHUNK]
        ]
        if rows:
            # Typing: the query reads integrated entries only: seq IS NOT NULL.
            yield rows  # type: ignore[misc]
        if len(rows) < CHUNK:
            return
        # Typing: the query reads integrated entries only: seq IS NOT NULL.
        after = rows[-1][0]  # type: ignore[assignment]


def consistency_line(*, log: str, old: int, new: int) -> bytes:
    hashes = [digest.hex() for digest in tree.consistency_proof(log=log, old=old, new=new)]
    return av.compact_json({"consistency": {"from": old, "hashes": hashes, "to": new}}) + b"\n"


def inclusion_line(*, log: str, seq: int, size: int) -> bytes:
    hashes = [digest.hex() for digest in tree.inclusion_proof(log=log, seq=seq, size=size)]
    return av.compact_json({"inclusion": {"hashes": hashes, "seq": seq, "size": size}}) + b"\n"


def batch_line(*, log: str, seqs: list[int], size: int) -> bytes:
    hashes = [base64.b64encode(digest).decode() for digest in tree.batch_proof(log=log, seqs=seqs, size=size)]
    runs: list[list[int]] = []
    for seq in seqs:
        if runs and runs[-1][1] == seq - 1:
            runs[-1][1] = seq
        else:
            runs.append([seq, seq])
    return av.compact_json({"batch": {"hashes": hashes, "seqs": runs, "size": size}}) + b"\n"


def _proven(plan: ExportPlan) -> Iterator[bytes]:
    size = plan.closing.size
    yield av.header_line(plan.header())
    witnessed = witness.newest_witnessed(log=plan.log, upto=plan.closing, keys=list(plan.keys), skipped=plan.skipped)
    if witnessed is not None and witnessed.pk != plan.closing.pk:
        # The newest checkpoint witnesses cosigned, linked to the closing one by a consistency proof.
        yield av.checkpoint_line(witness.cosigned_note(witnessed))
        if witnessed.size != size:
            yield consistency_line(log=plan.log, old=witnessed.size, new=size)
    yield av.checkpoint_line(witness.cosigned_note(plan.closing))
    for old in plan.consistency_from:
        if old < size:
            yield consistency_line(log=plan.log, old=old, new=size)
    if plan.batched:
        yield from _batches(plan)
        return
    for rows in _chunks(plan.selected):
        for seq, body in rows:
            yield body + b"\n"
            yield inclusion_line(log=plan.log, seq=seq, size=size)


def _batches(plan: ExportPlan) -> Iterator[bytes]:
    seqs: list[int] = []
    for rows in _chunks(plan.selected):
        for seq, body in rows:
            yield body + b"\n"
            seqs.append(seq)
            if len(seqs) == BATCH:
                yield batch_line(log=plan.log, seqs=seqs, size=plan.closing.size)
                seqs = []
    if seqs:
        yield batch_line(log=plan.log, seqs=seqs, size=plan.closing.size)


class _Checkpoints:
    """The checkpoints a full export holds, size by size, and the consistency proofs between them."""

    def __init__(self, plan: ExportPlan) -> None:
        self.plan = plan
        self.last_tree_size: int | None = None
        self.judge = genuine.Judge(log=plan.log, keys=list(plan.keys))

    def lines(self, first: int, last: int, *, opening: bool = False) -> dict[int, list[bytes]]:
        plan = self.plan
        signed = AuditCheckpoint.objects.filter(log=plan.log, size__gte=first, size__lte=last, pk__lte=plan.closing.pk)
        if opening:  # after a frontier, only plain tree checkpoints: the chain and the switch are archived
            signed = signed.filter(tree=True, chain_head="")
        newest = (
            signed.values("size", "tree", "chain_head").annotate(last_pk=Max("pk")).values_list("last_pk", flat=True)
        )
        pks = [
            pk
            for pk in (self._genuine(signed, row) for row in AuditCheckpoint.objects.filter(pk__in=list(newest)))
            if pk
        ]
        notes = witness.notes_with_cosignatures(pks)
        rows = [
            (size, is_tree, chain, notes[pk])
            for pk, size, is_tree, chain in AuditCheckpoint.objects.filter(pk__in=pks).values_list(
                "pk", "size", "tree", "chain_head"
            )
        ]
        # Per size: the chain checkpoint, then the switch, then the tree checkpoint.
        ordered = sorted(rows, key=lambda row: (row[0], row[1], not row[2]))
        out: dict[int, list[bytes]] = {}
        for size, is_tree, _chain, note in ordered:
            lines = out.setdefault(size, [])
            if is_tree:
                if self.last_tree_size and self.last_tree_size != size:  # the empty tree needs no proof
                    lines.append(consistency_line(log=plan.log, old=self.last_tree_size, new=size))
                self.last_tree_size = size
            lines.append(av.checkpoint_line(note))
        return out

    def _genuine(self, signed: QuerySet[AuditCheckpoint], newest: AuditCheckpoint) -> int | None:
        """The newest genuine row of one (size, kind): almost always the newest row, checked once;
        rows that do not verify are passed over (operations.audit.genuine)."""
        found = self.judge.problem(newest)
        if found is None:
            return newest.pk
        genuine.add_skipped(self.plan.skipped, found)
        same = signed.filter(size=newest.size, tree=newest.tree, chain_head=newest.chain_head, pk__lt=newest.pk)
        try:
            earlier = genuine.first_genuine(same.order_by("-pk"), judge=self.judge, skipped=self.plan.skipped)
        except genuine.TooManySkipped as exc:
            raise ExportError(str(exc)) from None
        return None if earlier is None else earlier.pk


def _full(plan: ExportPlan) -> Iterator[bytes]:
    yield av.header_line(plan.header())
    notes = _Checkpoints(plan)
    if plan.start:
        hashes = [digest.hex() for digest in tree.frontier(log=plan.log, size=plan.start).hashes()]
        yield av.compact_json({"frontier": {"hashes": hashes, "size": plan.start}}) + b"\n"
    yield from notes.lines(plan.start, plan.start, opening=bool(plan.start)).get(plan.start, [])
    for rows in _chunks(plan.selected):
        covering = notes.lines(rows[0][0], rows[-1][0])
        for seq, body in rows:
            yield body + b"\n"
            yield from covering.get(seq, [])


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
