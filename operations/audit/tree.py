"""The stored Merkle tree: node lookups, roots at any size, inclusion and consistency proofs.

Only complete aligned subtrees are stored (AuditTreeNode), level 0 holding every leaf hash; any
range a proof names is a handful of them (operations.audit.verify.merkle.aligned_nodes), fetched
in one query per proof. Reads only: the integrator (operations.audit.integrate) writes.
"""

from __future__ import annotations

from collections.abc import Iterable

from operations.audit import database
from operations.audit.verify import merkle


class TreeError(Exception):
    """A node the tree should hold is missing: the integrator has not reached it, or rows were lost."""


def nodes(*, log: str, wanted: Iterable[tuple[int, int]]) -> dict[tuple[int, int], bytes]:
    """The stored hashes of the (level, index) nodes asked for, in one indexed query (on SQLite,
    one per few hundred nodes)."""
    wanted = set(wanted)
    if not wanted:
        return {}
    rows = database.stored_nodes(log=log, wanted=wanted)
    found = {(level, index): bytes(digest) for level, index, digest in rows}
    if len(found) != len(wanted):
        missing = sorted(wanted - found.keys())[:3]
        raise TreeError(f"tree nodes {missing} of {log} are missing")
    return found


def _range_hashes(*, log: str, ranges: list[tuple[int, int]]) -> list[bytes]:
    needed = [node for start, end in ranges for node in merkle.aligned_nodes(start, end)]
    stored = nodes(log=log, wanted=needed)
    return [merkle.range_hash(start, end, lambda level, index: stored[(level, index)]) for start, end in ranges]


def frontier(*, log: str, size: int) -> merkle.CompactRange:
    """The compact range of the first `size` leaves, from stored nodes."""
    wanted = merkle.frontier_nodes(size)
    stored = nodes(log=log, wanted=wanted)
    return merkle.CompactRange(size, [stored[node] for node in wanted])


def root_at(*, log: str, size: int) -> bytes:
    return frontier(log=log, size=size).root()


def inclusion_proof(*, log: str, seq: int, size: int) -> list[bytes]:
    """The RFC 9162 audit path of entry `seq` (leaf seq - 1) in the tree of `size` leaves."""
    return _range_hashes(log=log, ranges=merkle.inclusion_ranges(seq - 1, size))


def batch_proof(*, log: str, seqs: list[int], size: int) -> list[bytes]:
    """The batch inclusion proof of entries `seqs` (sorted, distinct) in the tree of `size` leaves:
    each subtree hash the entries share appears once (merkle.batch_ranges), in one query."""
    return _range_hashes(log=log, ranges=merkle.batch_ranges([seq - 1 for seq in seqs], size))


def consistency_proof(*, log: str, old: int, new: int) -> list[bytes]:
    """The RFC 9162 consistency proof from the tree of `old` leaves to the tree of `new` (empty
    when they are the same tree or the old one is empty)."""
    if old == 0 or old == new:
        return []
    return _range_hashes(log=log, ranges=merkle.consistency_ranges(old, new))
