from __future__ import annotations

import json
import subprocess
import sys
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.catalogue import PRECISIONS
from scheduler.fleet import PlanInputError, parse_plan_input
from tests.scheduler.helpers import gpu, job, node, plan_input

ROOT = Path(__file__).resolve().parents[2]


def cli(tmp_path: Path, raw: object, *extra: str) -> subprocess.CompletedProcess:
    source = tmp_path / "in.json"
    source.write_text(json.dumps(raw))
    return subprocess.run(
        [sys.executable, "-m", "scheduler", "plan", "--input", str(source), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )


def test_plan_writes_placements_with_price_breakdowns(tmp_path):
    raw = plan_input(node("h", "H100-SXM5-80GB", 2), [job("j", gpus=2, hours="12.5")])
    out = tmp_path / "out.json"
    done = cli(tmp_path, raw, "--output", str(out))
    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert set(result) == {"placements", "unplaced", "preempted", "total_cost"}
    (placement,) = result["placements"]
    assert placement["job"] == "j" and placement["gpus"] == ["h-0", "h-1"]
    price = placement["price"]
    for key in ("energy_kwh", "tariff_per_kwh", "pue", "coefficient", "derating", "total"):
        assert isinstance(price[key], str)
    assert Decimal(price["total"]) > 0 and price["pue"] == "1.2000"
    assert isinstance(price["energy_attributed_mj"], int)


def test_plan_takes_the_new_precisions_and_a_memory_bound_fraction(tmp_path):
    gpus = node("l", "L4", 1) + node("b", "B200-SXM-180GB", 1) + node("v", "V100-SXM2", 1)
    jobs = [
        job("int8", precision="INT8", hours=1, memory_bound="0.5"),
        job("fp64", precision="FP64_TENSOR", hours=1),
        job("dp", precision="FP64", hours=1),
    ]
    done = cli(tmp_path, plan_input(gpus, jobs))
    assert done.returncode == 0, done.stderr
    result = json.loads(done.stdout)
    where = {p["job"]: p for p in result["placements"]}
    assert where["int8"]["gpus"] == ["l-0"] and where["int8"]["price"]["memory_bound"] == "0.5"
    assert where["fp64"]["gpus"] == ["b-0"]  # no FP64 tensor path on a V100 or an L4
    assert where["dp"]["gpus"] == ["v-0"]  # the B200 is taken; L4 states no FP64 figure
    assert "memory_bound" not in where["fp64"]["price"]


def test_plan_prints_to_stdout_without_output(tmp_path):
    done = cli(tmp_path, plan_input(node("v", "V100-SXM2", 1), [job("j")]))
    assert done.returncode == 0 and json.loads(done.stdout)["placements"][0]["job"] == "j"


@pytest.mark.parametrize(
    ("raw", "message"),
    [
        (plan_input([gpu("g", "B200", "n")], []), "gpus[0] 'g': unknown generation 'B200'"),
        (
            plan_input(node("n", "L40S", 1), [job("j", precision="FP4")]),
            "jobs[0] 'j': unknown precision 'FP4'",
        ),
        (
            plan_input(node("n", "L40S", 1), [job("j"), job("j")]),
            "jobs[1] 'j': duplicate job id 'j'",
        ),
        (
            plan_input([gpu("g", "L40S", "n"), gpu("g", "L40S", "n")], []),
            "gpus[1] 'g': duplicate GPU id 'g'",
        ),
        (plan_input(node("n", "L40S", 1), [job("j", hours=-1)]), "jobs[0] 'j': 'hours' must be in"),
        (plan_input([gpu("g", "L40S", "n", site="mars")], []), "site 'mars' is not in 'sites'"),
        (
            plan_input(node("n", "L4", 1), [job("j", memory_bound="1.01")]),
            "jobs[0] 'j': 'memory_bound' must be in [0, 1], got 1.01",
        ),
    ],
)
def test_invalid_input_exits_1_naming_the_entry(tmp_path, raw, message):
    done = cli(tmp_path, raw)
    assert done.returncode == 1
    assert message in done.stderr and done.stderr.count("\n") == 1
    assert done.stdout == ""


def test_unreadable_or_non_json_input_is_one_line(tmp_path):
    bad = tmp_path / "in.json"
    bad.write_text("{not json")
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "plan", "--input", str(bad)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1 and "is not valid JSON" in done.stderr
    done = subprocess.run(
        [sys.executable, "-m", "scheduler", "plan", "--input", str(tmp_path / "missing")],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert done.returncode == 1 and "cannot read" in done.stderr


json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.text(max_size=8)
    | st.decimals(allow_nan=False, allow_infinity=False),
    lambda inner: st.lists(inner, max_size=4)
    | st.dictionaries(st.text(max_size=6), inner, max_size=4),
    max_leaves=20,
)


@settings(max_examples=300, deadline=None)
@given(json_values)
def test_parser_rejects_arbitrary_json_with_a_clear_error(catalogue, value):
    try:
        parse_plan_input(value, catalogue)
    except PlanInputError as exc:
        assert str(exc)


entries = st.fixed_dictionaries(
    {
        "id": st.text(min_size=1, max_size=4),
        "generation": st.sampled_from(["L40S", "X", 3]),
        "node": st.text(max_size=3),
        "site": st.sampled_from(["s1", "s2", None]),
        "free": st.booleans() | st.none(),
        "attested": st.booleans(),
    },
    optional={
        "temp_c": st.integers(-100, 300) | st.text(max_size=3),
        "power_w": st.integers(-5, 9000) | st.floats(),
    },
)
jobs = st.fixed_dictionaries(
    {
        "id": st.text(min_size=1, max_size=4),
        "gpus": st.integers(-2, 5000) | st.booleans(),
        "precision": st.sampled_from([*PRECISIONS, "fp16", None]),
        "hours": st.integers(-3, 10_000) | st.text(max_size=4) | st.floats(),
        "priority": st.integers(-(10**7), 10**7),
    },
    optional={
        "single_node": st.booleans() | st.integers(),
        "min_memory_gb": st.integers(-1, 99),
        "memory_bound": st.decimals(-1, 2) | st.text(max_size=3) | st.none(),
    },
)


@settings(max_examples=300, deadline=None)
@given(st.lists(entries, max_size=4), st.lists(jobs, max_size=4))
def test_parser_on_near_valid_input_either_accepts_or_names_the_entry(catalogue, gpus, jobs):
    raw = {
        "sites": [{"id": "s1", "pue": "1.1"}, {"id": "s2", "pue": 2}],
        "gpus": gpus,
        "jobs": jobs,
    }
    try:
        parsed = parse_plan_input(raw, catalogue)
    except PlanInputError as exc:
        assert str(exc).startswith(("gpus[", "jobs[")), str(exc)
    else:
        assert all(j.hours >= 0 and j.gpus >= 1 for j in parsed.jobs)


def test_absurd_numbers_get_bounded_messages(catalogue):
    for hours, expected in (
        (10**5000, "must be in [0, 8784], got 1000"),
        ("9" * 100, "longer than 64"),
        ("NaN", "must be in"),
        ([1] * 1000, "must be a number, got [1, 1"),
    ):
        raw = plan_input(node("n", "L40S", 1), [job("j", hours=hours)])
        with pytest.raises(PlanInputError) as info:
            parse_plan_input(raw, catalogue)
        assert expected in str(info.value) and len(str(info.value)) < 200
