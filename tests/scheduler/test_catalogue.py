"""The catalogue holds datasheet facts: FP64, FP64 tensor and INT8 where the datasheet gives
them, H200, B200 and L4, dense figures only where pricing reads them, and a parser that
refuses a sparse figure entered as dense."""

from __future__ import annotations

import copy
import json
from decimal import Decimal
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler.catalogue import (
    DEFAULT_PATH,
    PRECISIONS,
    SPARSE_PRECISIONS,
    CatalogueError,
    load_catalogue,
    parse_catalogue,
)

D = Decimal

# (FP64, FP64 tensor, INT8 dense) per generation, from the datasheets named in `source`;
# None: the generation has no such path or its datasheet states no figure.
EXPECTED = {
    "V100-SXM2": ("7.8", None, None),
    "V100-PCIE": ("7", None, None),
    "A100-SXM4-80GB": ("9.7", "19.5", "624"),
    "A100-PCIE-80GB": ("9.7", "19.5", "624"),
    "A100-PCIE-40GB": ("9.7", "19.5", "624"),
    "L40S": (None, None, "733"),
    "L4": (None, None, "242.5"),
    "H100-SXM5-80GB": ("34", "67", "1978.9"),
    "H100-PCIE-80GB": ("26", "51", "1513"),
    "H200-SXM5-141GB": ("34", "67", "1978.9"),
    "B200-SXM-180GB": ("37", "37", "4500"),
}


def raw_catalogue() -> dict:
    return json.loads(DEFAULT_PATH.read_text(), parse_float=Decimal)


@pytest.mark.parametrize("gid", sorted(EXPECTED))
def test_fp64_fp64_tensor_and_int8_match_the_datasheets(catalogue, gid):
    dense = catalogue.get(gid).dense_tflops
    for precision, figure in zip(("FP64", "FP64_TENSOR", "INT8"), EXPECTED[gid], strict=True):
        assert dense.get(precision) == (None if figure is None else D(figure)), precision


def test_the_catalogue_lists_exactly_the_expected_generations(catalogue):
    assert sorted(catalogue.generations) == sorted(EXPECTED)


@pytest.mark.parametrize(
    ("gid", "power_w", "memory_gb", "bandwidth_gbs", "fp16", "fp16_sparse"),
    [
        ("H200-SXM5-141GB", 700, 141, 4800, "989.4", "1979"),
        ("B200-SXM-180GB", 1000, 180, 7700, "2250", "4500"),
        ("L4", 72, 24, 300, "121", "242"),
    ],
)
def test_new_generations_carry_their_datasheet_figures(
    catalogue, gid, power_w, memory_gb, bandwidth_gbs, fp16, fp16_sparse
):
    gen = catalogue.get(gid)
    assert (gen.board_power_w, gen.memory_gb, gen.memory_bandwidth_gbs) == (
        power_w,
        memory_gb,
        bandwidth_gbs,
    )
    assert (gen.dense_tflops["FP16"], gen.sparse_tflops["FP16"]) == (D(fp16), D(fp16_sparse))


def test_every_sparse_figure_is_twice_its_dense_one_and_only_for_tensor_precisions(catalogue):
    for gen in catalogue.generations.values():
        assert set(gen.sparse_tflops) <= set(SPARSE_PRECISIONS), gen.id
        for precision, sparse in gen.sparse_tflops.items():
            assert abs(sparse / gen.dense_tflops[precision] - 2) < D("0.05"), (gen.id, precision)


def test_every_source_names_its_datasheet_and_says_where_dense_was_derived(catalogue):
    for gen in catalogue.generations.values():
        assert "datasheet" in gen.source or "specifications" in gen.source, gen.id
    for gid in ("L4", "B200-SXM-180GB"):  # datasheets print sparse tensor figures only
        assert "dense = sparse / 2" in catalogue.get(gid).source


def test_every_precision_is_supported_somewhere_and_int8_never_on_volta(catalogue):
    for precision in PRECISIONS:
        assert any(g.supports(precision) for g in catalogue.generations.values()), precision
    assert not catalogue.get("V100-SXM2").supports("INT8")


@pytest.mark.parametrize(
    ("gid", "field", "precision", "value", "message"),
    [
        # the seed's mistake: the H100's sparse FP16 peak entered as dense
        (
            "H100-SXM5-80GB",
            "dense_tflops",
            "FP16",
            1979,
            r"'H100-SXM5-80GB'\.dense_tflops\.FP16.*not half",
        ),
        (
            "A100-SXM4-80GB",
            "sparse_tflops",
            "FP64",
            19.4,
            r"sparse_tflops: precision 'FP64' is not one of",
        ),
        ("V100-SXM2", "sparse_tflops", "INT8", 250, r"sparse_tflops\.INT8: a sparse figure needs"),
        (
            "A100-SXM4-80GB",
            "dense_tflops",
            "FP64_TENSOR",
            4.85,
            r"FP64_TENSOR: needs an FP64 figure no larger",
        ),
        ("L4", "dense_tflops", "FP4", 485, r"'L4'\.dense_tflops: precision 'FP4'"),
    ],
)
def test_rejects_figures_that_break_a_rule_naming_generation_and_precision(
    gid, field, precision, value, message
):
    raw = raw_catalogue()
    entry = next(e for e in raw["generations"] if e["id"] == gid)
    entry[field][precision] = Decimal(str(value))
    with pytest.raises(CatalogueError, match=message):
        parse_catalogue(raw)


def test_an_operator_extended_file_loads(tmp_path: Path):
    raw = raw_catalogue()
    extra = copy.deepcopy(next(e for e in raw["generations"] if e["id"] == "L4"))
    extra["id"] = "L4-derated"
    extra["board_power_w"] = 60
    raw["generations"].append(extra)
    path = tmp_path / "catalogue.json"
    path.write_text(json.dumps(raw, default=str))
    assert load_catalogue(path).get("L4-derated").board_power_w == 60


figures = st.dictionaries(
    st.sampled_from([*PRECISIONS, "FP4", ""]),
    st.integers(-5, 5000)
    | st.decimals(allow_nan=True)
    | st.sampled_from(["1e999999", "1e-999999", "1e9", "0.000001"])
    | st.text(max_size=4)
    | st.none(),
    max_size=4,
)
entries = st.fixed_dictionaries(
    {
        "id": st.sampled_from(["V100-SXM2", "X", ""]),
        "family": st.just("F"),
        "architecture": st.just("A"),
        "form_factor": st.just("PCIe"),
        "board_power_w": st.integers(-1, 2000) | st.booleans(),
        "memory_gb": st.just(16),
        "memory_bandwidth_gbs": st.just(100),
        "dense_tflops": figures,
        "source": st.text(max_size=3),
    },
    optional={"sparse_tflops": figures | st.lists(st.integers(), max_size=2)},
)


@settings(max_examples=300, deadline=None)
@given(st.lists(entries | st.integers(), max_size=3))
def test_parser_on_near_valid_entries_either_accepts_or_names_the_rule(entries):
    raw = {"schema": "wattlease.catalogue/1", "version": "t", "baseline": "V100-SXM2"}
    raw["generations"] = entries
    try:
        parsed = parse_catalogue(raw)
    except CatalogueError as exc:
        assert str(exc), "an error must say what is wrong"
    else:
        for gen in parsed.generations.values():
            assert gen.dense_tflops and all(v > 0 for v in gen.dense_tflops.values())
            for precision, sparse in gen.sparse_tflops.items():
                assert abs(sparse / gen.dense_tflops[precision] - 2) <= D("0.1")


def test_each_name_the_driver_reports_belongs_to_one_generation(catalogue):
    """RegisterNode accepts a GPU under a generation only when its reported NVML name is one
    of that generation's: a name shared by two generations would let either be claimed."""
    owners: dict[str, str] = {}
    for gen in catalogue.generations.values():
        assert gen.nvml_names, gen.id
        for name in gen.nvml_names:
            assert owners.setdefault(name, gen.id) == gen.id, (name, owners[name], gen.id)
    assert catalogue.get("H100-SXM5-80GB").nvml_names == ("NVIDIA H100 80GB HBM3",)


@pytest.mark.parametrize("names", [None, [], [""], ["NVIDIA L4", 4], "NVIDIA L4"])
def test_a_generation_without_the_names_the_driver_reports_is_refused(names):
    raw = raw_catalogue()
    raw["generations"][0]["nvml_names"] = names
    with pytest.raises(CatalogueError, match=r"nvml_names: must list the names NVML reports"):
        parse_catalogue(raw)
