"""Settle's sequence rules as pure functions (ledger.contract.billing), over random bills: a line is
accepted exactly when it continues the bill, and accepted lines tile the lease's time."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given
from hypothesis import strategies as st

from ledger import units
from ledger.contract import billing
from ledger.contract.state import ContractError

NS_PER_MS = units.NS_PER_MS
NOW_MS = 10**12


def lease() -> dict:
    terms = {"start_ms": 0, "generation": "H100-SXM5-80GB"}
    return {
        "lease_id": "L",
        "terms": terms,
        "migrations": [],
        "billing": {"next_seq": 0, "billed_until_ms": 0, "final": False},
    }


@given(st.lists(st.tuples(st.integers(0, 3), st.integers(-5, 5), st.integers(0, 50)), max_size=20))
def test_only_contiguous_lines_are_accepted_and_they_tile_time(attempts):
    record = lease()
    accepted = []
    for seq_skew, start_skew, length in attempts:
        bill = record["billing"]
        start = bill["billed_until_ms"] + start_skew
        req = {
            "interval_seq": bill["next_seq"] + seq_skew,
            "start_ms": start,
            "end_ms": start + length,
            "final": False,
        }
        try:
            billing.check_sequence(record, req, NOW_MS * NS_PER_MS)
        except ContractError as exc:
            assert seq_skew or start_skew, exc  # an honest next line is never refused
            rule = str(exc).split("]")[0] + "]"
            assert rule in {"[settle.sequence]", "[settle.overlap]", "[settle.gap]"}
            continue
        assert seq_skew == 0 and start_skew == 0
        billing.advance(record, req)
        accepted.append((req["start_ms"], req["end_ms"]))
    assert all(a[1] == b[0] for a, b in pairwise(accepted))
    assert record["billing"]["next_seq"] == len(accepted)


def test_a_line_across_a_migration_has_no_terms_and_each_side_has_its_own():
    record = lease()
    new = {"start_ms": 100, "generation": "A100-SXM4-80GB"}
    record["migrations"].append({"terms": record["terms"], "until_ms": 100})
    record["terms"] = new
    assert billing.terms_for(record, 0, 100)["generation"] == "H100-SXM5-80GB"
    assert billing.terms_for(record, 100, 200) is new
    with pytest.raises(ContractError, match=r"\[settle.terms\]"):
        billing.terms_for(record, 50, 150)
