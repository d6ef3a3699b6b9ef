"""Readings behind a bill line: the parser of untrusted CSV, the digest and the energy, and
that they agree with the scheduler's settlement of the same samples."""

from __future__ import annotations

from itertools import pairwise

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from attest import readings
from scheduler.settlement import measure, telemetry_digest
from scheduler.telemetry.sample import TelemetrySample

GPU = "GPU-a"


def rows(samples: list[TelemetrySample]) -> str:
    return "".join(readings.row_text(s.canonical()) + "\n" for s in samples)


@given(st.text(max_size=400))
def test_parser_raises_only_value_error_naming_the_line(text):
    try:
        parsed = readings.parse_rows(text)
    except ValueError as exc:
        assert str(exc).startswith(("line ", "readings are"))
        return
    assert all(r.row.count(",") == len(readings.FIELDS) - 1 for r in parsed)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("1,GPU-a,3", "expected 7 fields"),
        ("1,,3,4,5,6,7", "gpu must be"),
        ("1,GPU-a,-3,4,5,6,7", "are not all integers"),
        ("1,GPU-a,03,4,5,6,7", "are not all integers"),
        ("1,GPU-a,1.5,4,5,6,7", "are not all integers"),
    ],
)
def test_parser_names_what_is_wrong(text, message):
    with pytest.raises(ValueError, match=message):
        readings.parse_rows(text)


samples_strategy = st.lists(
    st.tuples(st.integers(0, 10**6), st.integers(0, 10**9), st.sampled_from([GPU, "GPU-b"])),
    min_size=1,
    max_size=30,
    unique_by=lambda t: (t[0], t[2]),
)


@settings(max_examples=200, deadline=None)
@given(samples_strategy)
def test_readings_rederive_the_schedulers_digest_and_energy(raw):
    samples = [TelemetrySample(g, t, e, 300_000, 90, 50, 60) for t, e, g in raw]
    parsed = readings.parse_rows(rows(samples))
    per_gpu = {}
    energy = 0
    for gpu in {s.gpu for s in samples}:
        m = measure(samples, gpu, 0, 10**6)
        per_gpu[gpu] = telemetry_digest(m.samples)
        energy += m.measured_mj
    assert readings.gpu_digests(parsed) == per_gpu
    assert readings.energy_mj(parsed) == energy


def test_a_restart_is_not_counted_and_disagreeing_duplicates_are_refused():
    text = "0,GPU-a,100,1,1,1,1\n10,GPU-a,160,1,1,1,1\n20,GPU-a,5,1,1,1,1\n30,GPU-a,25,1,1,1,1\n"
    assert readings.energy_mj(readings.parse_rows(text)) == 60 + 20
    with pytest.raises(ValueError, match="disagree"):
        readings.energy_mj(readings.parse_rows("0,GPU-a,1,1,1,1,1\n0,GPU-a,2,1,1,1,1\n"))


# -- attested telemetry: batches a bill line cites --------------------------------------------

ROWS = st.lists(
    st.tuples(st.sampled_from(["GPU-a", "GPU-b"]), st.integers(0, 10**6)),
    max_size=20,
    unique_by=lambda r: r,
)


def _readings(pairs: list[tuple[str, int]]) -> list[readings.Reading]:
    text = "".join(f"{t},{gpu},{t * 3},0,0,0,0\n" for gpu, t in pairs)
    return readings.parse_rows(text)


def _cut(parsed: list[readings.Reading], cuts: list[int]) -> list[readings.Batch]:
    """Each GPU's rows in time order cut into batches at the given positions."""
    out = []
    for gpu in ("GPU-a", "GPU-b"):
        mine = sorted((r for r in parsed if r.gpu == gpu), key=lambda r: r.t_ms)
        edges = sorted({0, len(mine), *(c % (len(mine) + 1) for c in cuts)})
        for lo, hi in pairwise(edges):
            chunk = mine[lo:hi]
            out.append(readings.Batch(gpu, readings.gpu_digest(r.row for r in chunk), len(chunk)))
    return out


@given(ROWS, st.lists(st.integers(0, 30), max_size=4))
def test_readings_split_back_into_the_batches_they_were_cut_into(pairs, cuts):
    parsed = _readings(pairs)
    assert readings.split_batches(parsed, _cut(parsed, cuts)) == []


@given(ROWS.filter(bool), st.lists(st.integers(0, 30), max_size=4), st.integers(0, 19))
def test_an_altered_or_missing_reading_breaks_its_batch(pairs, cuts, which):
    parsed = _readings(pairs)
    batches = _cut(parsed, cuts)
    victim = parsed[which % len(parsed)]
    fields = victim.row.split(",")
    fields[2] = str(victim.energy_mj + 1)  # the counter reading altered
    changed = readings.parse_rows(",".join(fields))[0]
    altered = [changed if r is victim else r for r in parsed]
    assert readings.split_batches(altered, batches) != []
    assert readings.split_batches([r for r in parsed if r is not victim], batches) != []


def test_the_qualifying_data_is_the_nonce_alone_without_readings_and_bound_with_them():
    nonce = b"\x01" * 32
    assert readings.qualifying_data(nonce, {}) == nonce
    bound = readings.qualifying_data(nonce, {"GPU-a": "ab" * 32})
    assert len(bound) == 32 and bound != nonce
    assert bound != readings.qualifying_data(nonce, {"GPU-a": "ac" * 32})
    assert bound != readings.qualifying_data(b"\x02" * 32, {"GPU-a": "ab" * 32})
