"""The read-version chain of ledger.audit.validity, rule by rule, on transactions written out
by hand (what a receipt's verifier hands it): each case is one a mutant of the rule let
through (docs/threat-model.md, "Mutation testing")."""

from __future__ import annotations

from ledger.audit.validity import ChainTx, chain_defects
from ledger.contract.state import LEASE, settlements_prefix

LEASE_ID = "L1"
RECORD = LEASE + LEASE_ID  # the lease's own key: its versions must chain
LINE0 = settlements_prefix(LEASE_ID) + "000000000000\x00"
OTHER_LINE = settlements_prefix("L2") + "000000000000\x00"  # another lease's: not chained
NODE = "node:n1"  # shown only in part by a receipt: stale reads only


def tx(tx_id: str, at: tuple[int, int], reads: dict, writes: dict | None = None) -> ChainTx:
    return ChainTx(tx_id, at, reads, writes or {})


def test_a_read_of_the_readers_own_position_is_from_its_future():
    found = chain_defects([tx("a", (2, 0), {RECORD: (2, 0)})], LEASE_ID)
    assert found == [
        "block 2 tx 0 (a): [receipt.future_read] reads 'lease:L1' at (2, 0), not before "
        "itself; the receipt calls it VALID"
    ]


def test_a_read_of_a_write_not_shown_names_it():
    unseen = chain_defects([tx("a", (3, 0), {RECORD: (1, 0)})], LEASE_ID)
    assert unseen == [
        "block 3 tx 0 (a): [receipt.missing_write] reads 'lease:L1' at (1, 0), a write the "
        "receipt does not show; the receipt calls it VALID"
    ]
    newer = chain_defects(
        [tx("a", (1, 0), {}, {RECORD: b"1"}), tx("b", (3, 0), {RECORD: (2, 0)})], LEASE_ID
    )
    assert newer == [
        "block 3 tx 0 (b): [receipt.missing_write] reads 'lease:L1' at (2, 0), a write the "
        "receipt does not show; the receipt calls it VALID"
    ]


def test_another_leases_lines_and_newer_versions_of_other_keys_are_not_chained():
    txs = [
        tx("a", (1, 0), {}, {NODE: b"n"}),
        tx("b", (3, 0), {OTHER_LINE: (2, 0), NODE: (2, 1)}),  # later writes the receipt omits
    ]
    assert chain_defects(txs, LEASE_ID) == []


def test_a_lease_key_read_absent_after_a_write_is_stale_and_after_a_delete_is_not():
    written = [tx("a", (1, 0), {LINE0: None}, {LINE0: b"x"}), tx("b", (2, 0), {LINE0: None})]
    assert "[receipt.mvcc_read_conflict]" in chain_defects(written, LEASE_ID)[0]
    deleted = [tx("a", (1, 0), {}, {LINE0: None}), tx("b", (2, 0), {LINE0: None})]
    assert chain_defects(deleted, LEASE_ID) == []


def test_every_bad_transaction_is_named_not_only_the_first():
    first = tx("a", (1, 0), {RECORD: None}, {RECORD: b"1"})
    twice = tx("a", (1, 1), {RECORD: None}, {RECORD: b"1"})
    stale = tx("c", (2, 0), {RECORD: None}, {RECORD: b"2"})
    staler = tx("d", (3, 0), {NODE: None, RECORD: None}, {RECORD: b"3"})
    found = chain_defects([first, twice, stale, staler], LEASE_ID)
    assert [d.split(": ")[1].split(" ")[0] for d in found] == [
        "[receipt.duplicate_txid]",
        "[receipt.mvcc_read_conflict]",
        "[receipt.mvcc_read_conflict]",
    ]


def test_a_chain_of_reads_each_naming_the_last_write_shown_is_valid():
    txs = [
        tx("a", (1, 0), {RECORD: None}, {RECORD: b"1"}),
        tx("b", (2, 0), {RECORD: (1, 0)}, {RECORD: b"2", LINE0: b"x"}),
        tx("c", (3, 0), {RECORD: (2, 0), LINE0: (2, 0)}, {RECORD: b"3"}),
    ]
    assert chain_defects(txs, LEASE_ID) == []


def test_another_key_read_older_than_a_write_shown_is_stale_and_at_it_is_not():
    older = [tx("a", (1, 0), {}, {NODE: b"n"}), tx("b", (2, 0), {NODE: (0, 3)})]
    assert chain_defects(older, LEASE_ID) == [
        "block 2 tx 0 (b): [receipt.mvcc_read_conflict] reads 'node:n1' at (0, 3), but the "
        "receipt shows it written at (1, 0) before; the receipt calls it VALID"
    ]
    at_it = [tx("a", (1, 0), {}, {NODE: b"n"}), tx("b", (2, 0), {NODE: (1, 0)})]
    assert chain_defects(at_it, LEASE_ID) == []
