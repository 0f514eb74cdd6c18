"""RFC 9162 Merkle tree hashing and proofs (section 2.1), SHA-256; standard library only.

Leaf hash ``H(0x00 || entry bytes)``, node hash ``H(0x01 || left || right)``, the hash of the
empty tree ``H("")``. Leaf indexes are 0-based here (entry ``seq`` n is leaf n - 1).

The server side (proof generation) needs the hashes of ranges of leaves; `inclusion_ranges` and
`consistency_ranges` name them as half-open ``(start, end)`` ranges and `aligned_nodes` splits any
such range into complete, aligned subtrees ``(level, index)`` - the only nodes pollerdash stores.
"""

from __future__ import annotations

import hashlib
import itertools
from collections.abc import Callable, Sequence

EMPTY_ROOT = hashlib.sha256(b"").digest()


def leaf_hash(entry: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + entry).digest()


def node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(n: int) -> int:
    """The largest power of two smaller than n (n > 1)."""
    return 1 << ((n - 1).bit_length() - 1)


class CompactRange:
    """The right edge of a growing tree: one hash per set bit of its size, O(log n) memory.

    `push` adds a leaf and returns the complete subtrees it closed, ``(level, index, hash)``, so
    the integrator stores exactly the nodes later proofs need; `absorb` adds many without them."""

    __slots__ = ("size", "_stack")

    def __init__(self, size: int = 0, frontier: Sequence[bytes] = ()) -> None:
        if len(frontier) != bin(size).count("1"):
            raise ValueError("a compact range holds one hash per set bit of its size")
        self.size = size
        # The subtrees' levels are the set bits of `size`, highest first: the last hash is the
        # lowest set bit's, and a new leaf merges once per trailing one bit of `size`.
        self._stack = list(frontier)

    def push(self, leaf: bytes) -> list[tuple[int, int, bytes]]:
        index = self.size
        level, digest = 0, leaf
        made = [(0, index, leaf)]
        stack = self._stack
        while index >> level & 1:
            digest = node_hash(stack.pop(), digest)
            level += 1
            made.append((level, index >> level, digest))
        stack.append(digest)
        self.size += 1
        return made

    def absorb(self, entries: Sequence[bytes], start: int, *, prefix: bytes, suffix: bytes) -> int:
        """Add ``entries[start:]`` as leaves (their leaf hashes) while each starts with `prefix` and
        ends with `suffix`; the index of the first one not added. The offline verifier's hot loop:
        a million-entry export spends its time here, so the hashing is inlined."""
        stack = self._stack
        pop, append = stack.pop, stack.append
        sha256 = hashlib.sha256
        copy_leaf_prefix = sha256(b"\x00").copy
        size = before = self.size
        for entry in itertools.islice(entries, start, None):
            if not (entry.endswith(suffix) and entry.startswith(prefix)):
                break
            leaf = copy_leaf_prefix()
            leaf.update(entry)
            digest = leaf.digest()
            bits = size
            while bits & 1:
                digest = sha256(b"\x01" + pop() + digest).digest()
                bits >>= 1
            append(digest)
            size += 1
        self.size = size
        return start + size - before

    def hashes(self) -> list[bytes]:
        """The frontier, left to right: what `CompactRange(size, hashes)` starts again from."""
        return list(self._stack)

    def root(self) -> bytes:
        if not self._stack:
            return EMPTY_ROOT
        digest = self._stack[-1]
        for left in reversed(self._stack[:-1]):
            digest = node_hash(left, digest)
        return digest


def frontier_nodes(size: int) -> list[tuple[int, int]]:
    """The (level, index) of each complete subtree of a compact range of `size`, left to right."""
    nodes, start = [], 0
    for level in range(size.bit_length() - 1, -1, -1):
        if size >> level & 1:
            nodes.append((level, start >> level))
            start += 1 << level
    return nodes


def aligned_nodes(start: int, end: int) -> list[tuple[int, int]]:
    """[start, end) as complete aligned subtrees, left to right (the ranges proofs name are the
    left-hand subtrees of RFC 9162's split, or a right edge: both decompose this way)."""
    nodes = []
    while start < end:
        level = (start & -start).bit_length() - 1 if start else (end - start).bit_length() - 1
        while start + (1 << level) > end:
            level -= 1
        nodes.append((level, start >> level))
        start += 1 << level
    return nodes


def range_hash(start: int, end: int, node: Callable[[int, int], bytes]) -> bytes:
    """MTH(D[start:end]) for a range that is an RFC 9162 subtree, from stored complete nodes."""
    parts = [node(level, index) for level, index in aligned_nodes(start, end)]
    digest = parts[-1]
    for left in reversed(parts[:-1]):
        digest = node_hash(left, digest)
    return digest


def inclusion_ranges(index: int, size: int) -> list[tuple[int, int]]:
    """PATH(index, D[0:size]) of RFC 9162 2.1.3.1, as ranges, bottom up."""
    if not 0 <= index < size:
        raise ValueError("leaf index outside the tree")
    ranges: list[tuple[int, int]] = []
    start, end = 0, size
    while end - start > 1:
        k = _split(end - start)
        if index < start + k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
    return ranges[::-1]


def consistency_ranges(old: int, new: int) -> list[tuple[int, int]]:
    """PROOF(old, D[0:new]) of RFC 9162 2.1.4.1, as ranges, bottom up."""
    if not 0 < old <= new:
        raise ValueError("a consistency proof needs 0 < old <= new")
    ranges: list[tuple[int, int]] = []
    start, end, whole = 0, new, True
    m = old
    while m != end - start:
        k = _split(end - start)
        if m <= k:
            ranges.append((start + k, end))
            end = start + k
        else:
            ranges.append((start, start + k))
            start += k
            m -= k
            whole = False
    if not whole:
        ranges.append((start, end))
    return ranges[::-1]


def verify_inclusion(*, index: int, size: int, leaf: bytes, proof: Sequence[bytes], root: bytes) -> bool:
    """RFC 9162 2.1.3.2."""
    if not 0 <= index < size:
        return False
    fn, sn, digest = index, size - 1, leaf
    for sibling in proof:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            digest = node_hash(sibling, digest)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            digest = node_hash(digest, sibling)
        fn >>= 1
        sn >>= 1
    return sn == 0 and digest == root


def verify_consistency(*, old: int, new: int, old_root: bytes, new_root: bytes, proof: Sequence[bytes]) -> bool:
    """RFC 9162 2.1.4.2 (a tree is consistent with itself and with the empty tree)."""
    if old > new or old < 0:
        return False
    if old == new:
        return not proof and old_root == new_root
    if old == 0:
        return not proof and old_root == EMPTY_ROOT
    if not proof:
        return False
    path = list(proof)
    if old & (old - 1) == 0:
        path.insert(0, old_root)
    fn, sn = old - 1, new - 1
    while fn & 1:
        fn >>= 1
        sn >>= 1
    first = second = path[0]
    for step in path[1:]:
        if sn == 0:
            return False
        if fn & 1 or fn == sn:
            first = node_hash(step, first)
            second = node_hash(step, second)
            while not fn & 1 and fn != 0:
                fn >>= 1
                sn >>= 1
        else:
            second = node_hash(second, step)
        fn >>= 1
        sn >>= 1
    return sn == 0 and first == old_root and second == new_root


# --- batch inclusion proofs (export format 3) ----------------------------------------------------------
#
# One proof for many leaves against one root: the hashes of the subtrees that hold no selected leaf
# but whose sibling does - each shared node appears once - in the order a left-to-right walk of the
# RFC 9162 tree meets them. That walk is fixed by the tree size and the selected indexes alone, so
# the proof needs no positions, and it is the least set of hashes that recomputes the root.


def batch_ranges(indexes: Sequence[int], size: int) -> list[tuple[int, int]]:
    """The (start, end) leaf ranges whose hashes prove the sorted, distinct `indexes` in the tree
    of `size` leaves, in proof order."""
    _check_batch(indexes, size)
    ranges: list[tuple[int, int]] = []
    position = 0

    def walk(start: int, end: int) -> None:
        nonlocal position
        if position == len(indexes) or indexes[position] >= end:
            ranges.append((start, end))
        elif end - start == 1:
            position += 1
        else:
            middle = start + _split(end - start)
            walk(start, middle)
            walk(middle, end)

    walk(0, size)
    return ranges


def batch_root(indexes: Sequence[int], leaves: Sequence[bytes], proof: Sequence[bytes], size: int) -> bytes:
    """The root the selected leaves (leaf hashes, in index order) and a `batch_ranges` proof lead
    to; ValueError when the proof has too few or too many hashes."""
    _check_batch(indexes, size)
    if len(leaves) != len(indexes):
        raise ValueError("one leaf per index")
    position = used = 0

    def walk(start: int, end: int) -> bytes:
        nonlocal position, used
        if position == len(indexes) or indexes[position] >= end:
            if used == len(proof):
                raise ValueError("the proof has too few hashes")
            used += 1
            return proof[used - 1]
        if end - start == 1:
            position += 1
            return leaves[position - 1]
        middle = start + _split(end - start)
        left = walk(start, middle)
        return node_hash(left, walk(middle, end))

    root = walk(0, size)
    if used != len(proof):
        raise ValueError("the proof has more hashes than the tree needs")
    return root


def _check_batch(indexes: Sequence[int], size: int) -> None:
    if not indexes:
        raise ValueError("a batch proof proves at least one leaf")
    if indexes[0] < 0 or indexes[-1] >= size:
        raise ValueError("leaf index outside the tree")
    if any(later <= earlier for earlier, later in zip(indexes, indexes[1:], strict=False)):
        raise ValueError("leaf indexes are sorted and distinct")
