"""RFC 9162 tree hashing and proofs against a brute-force Merkle tree hash (pure, no database)."""

from __future__ import annotations

import itertools
import random

import pytest

from operations.audit.verify import merkle


def mth(leaves: list[bytes]) -> bytes:
    """MTH of RFC 9162 section 2.1.1, written as the definition reads."""
    if not leaves:
        return merkle.EMPTY_ROOT
    if len(leaves) == 1:
        return leaves[0]
    k = 1 << ((len(leaves) - 1).bit_length() - 1)
    return merkle.node_hash(mth(leaves[:k]), mth(leaves[k:]))


def build(n: int) -> tuple[list[bytes], dict[tuple[int, int], bytes], merkle.CompactRange]:
    leaves = [merkle.leaf_hash(f"entry {i}".encode()) for i in range(n)]
    tree, nodes = merkle.CompactRange(), {}
    for leaf in leaves:
        for level, index, digest in tree.push(leaf):
            nodes[(level, index)] = digest
    return leaves, nodes, tree


def test_the_empty_tree_and_one_leaf():
    assert merkle.CompactRange().root() == merkle.EMPTY_ROOT
    assert merkle.leaf_hash(b"") == bytes.fromhex("6e340b9cffb37a989ca544e6bb780a2c78901d3fb33738768511a30617afa01d")


def test_roots_frontiers_inclusion_and_consistency_for_every_size_up_to_40():
    for n in range(1, 41):
        leaves, nodes, tree = build(n)
        root = mth(leaves)
        assert tree.root() == root
        reloaded = merkle.CompactRange(n, [nodes[x] for x in merkle.frontier_nodes(n)])
        assert reloaded.root() == root

        def node(level: int, index: int, nodes: dict[tuple[int, int], bytes] = nodes) -> bytes:
            return nodes[(level, index)]

        for i in range(n):
            ranges = merkle.inclusion_ranges(i, n)
            proof = [merkle.range_hash(a, b, node) for a, b in ranges]
            assert proof == [mth(leaves[a:b]) for a, b in ranges]
            assert merkle.verify_inclusion(index=i, size=n, leaf=leaves[i], proof=proof, root=root)
            assert not merkle.verify_inclusion(index=i, size=n, leaf=b"\x00" * 32, proof=proof, root=root)
            if proof:
                forged = [bytes(32)] + proof[1:]
                assert not merkle.verify_inclusion(index=i, size=n, leaf=leaves[i], proof=forged, root=root)
        for m in range(1, n + 1):
            proof = [merkle.range_hash(a, b, node) for a, b in merkle.consistency_ranges(m, n)]
            old = mth(leaves[:m])
            assert merkle.verify_consistency(old=m, new=n, old_root=old, new_root=root, proof=proof)
            if m < n:
                other = mth(leaves[: m - 1] + [bytes(32)])
                assert not merkle.verify_consistency(old=m, new=n, old_root=other, new_root=root, proof=proof)
                assert not merkle.verify_consistency(old=m, new=n, old_root=old, new_root=bytes(32), proof=proof)


def test_batch_proofs_against_the_definition_for_every_selection_of_small_trees():
    """Every non-empty subset of leaves for sizes up to 9, and sampled ones up to 40: the proof is
    the least set of subtree hashes (each shared one once), and any change to it fails."""
    rng = random.Random(9162)
    for n in range(1, 41):
        leaves = [merkle.leaf_hash(f"entry {i}".encode()) for i in range(n)]
        root = mth(leaves)
        subsets = (
            [list(c) for k in range(1, n + 1) for c in itertools.combinations(range(n), k)]
            if n <= 9
            else [sorted(rng.sample(range(n), rng.randint(1, n))) for _ in range(60)]
        )
        for indexes in subsets:
            ranges = merkle.batch_ranges(indexes, n)
            # No proof node holds a selected leaf; with the leaves they cover the tree exactly once.
            covered = sorted([i for a, b in ranges for i in range(a, b)] + indexes)
            assert covered == list(range(n))
            if len(indexes) == 1:
                assert len(ranges) == len(merkle.inclusion_ranges(indexes[0], n))
            proof = [mth(leaves[a:b]) for a, b in ranges]
            selected = [leaves[i] for i in indexes]
            assert merkle.batch_root(indexes, selected, proof, n) == root
            if proof:
                assert merkle.batch_root(indexes, selected, [bytes(32), *proof[1:]], n) != root
                with pytest.raises(ValueError, match="too few"):
                    merkle.batch_root(indexes, selected, proof[:-1], n)
            with pytest.raises(ValueError, match="more hashes"):
                merkle.batch_root(indexes, selected, [*proof, bytes(32)], n)
            if len(indexes) > 1:
                swapped = [selected[1], selected[0], *selected[2:]]
                assert merkle.batch_root(indexes, swapped, proof, n) != root


def test_a_batch_proof_shares_the_nodes_of_its_entries():
    # 100 entries 100,000 apart in 10,000,000 leaves, and 100 contiguous ones at the end.
    spread = [r * 100_000 + 12_345 for r in range(100)]
    separate = sum(len(merkle.inclusion_ranges(i, 10_000_000)) for i in spread)
    assert len(merkle.batch_ranges(spread, 10_000_000)) < 0.7 * separate
    assert len(merkle.batch_ranges(list(range(9_999_900, 10_000_000)), 10_000_000)) <= 24
    for bad in ([], [3, 3], [4, 2], [10]):
        with pytest.raises(ValueError):
            merkle.batch_ranges(bad, 10)
