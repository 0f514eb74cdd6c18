"""RFC 9162 tree hashing and proofs against a brute-force Merkle tree hash (pure, no database)."""

from __future__ import annotations

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
