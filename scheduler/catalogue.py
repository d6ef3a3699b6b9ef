"""The generation catalogue: datasheet facts per GPU generation, loaded from a versioned
data file (`ledger/data/catalogue-v1.json`, ledger data the contract checks lease terms
against) that an operator can extend.

Every figure is a Decimal so the pricing arithmetic never touches binary floating point.
Dense and sparse peaks are kept apart; only dense figures are used for pricing. The parser
refuses the mistakes that put a sparse figure where a dense one belongs: a sparse figure
for a precision without structured sparsity, or one that is not twice its dense figure.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

SCHEMA = "wattlease.catalogue/1"
# FP64 and FP32 are the vector (non-tensor) peaks; FP64_TENSOR the FP64 tensor-core path
# (Ampere and later); INT8 the tensor peak in TOPS.
PRECISIONS = ("FP32", "TF32", "BF16", "FP16", "FP8", "FP64", "FP64_TENSOR", "INT8")
SPARSE_PRECISIONS = ("TF32", "BF16", "FP16", "FP8", "INT8")  # 2:4 structured sparsity exists
SPARSITY_FACTOR = Decimal(2)  # 2:4 structured sparsity doubles the dense tensor peak
SPARSITY_TOLERANCE = Decimal("0.05")  # datasheets round: L40S prints 362.05 dense, 733 sparse
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "ledger" / "data" / "catalogue-v1.json"
MAX_CATALOGUE_BYTES = 1 << 20
MIN_FIGURE = Decimal("0.000001")  # no TFLOPS, W, GB or GB/s figure is smaller: a typo
MAX_FIGURE = Decimal(10) ** 9  # ... or larger


class CatalogueError(ValueError):
    """The catalogue file is unreadable or an entry is invalid; the message names it."""


@dataclass(frozen=True)
class Generation:
    id: str
    family: str
    architecture: str
    form_factor: str
    board_power_w: Decimal
    memory_gb: Decimal
    memory_bandwidth_gbs: Decimal
    dense_tflops: dict[str, Decimal]
    sparse_tflops: dict[str, Decimal] = field(default_factory=dict)
    source: str = ""
    nvml_names: tuple[str, ...] = ()  # what the driver reports (nvmlDeviceGetName)

    def supports(self, precision: str) -> bool:
        return precision in self.dense_tflops

    def watts_per_tflops(self, precision: str, power_w: Decimal | None = None) -> Decimal:
        """Board power (or a measured draw) per dense TFLOPS at `precision`."""
        if precision not in self.dense_tflops:
            raise CatalogueError(f"{self.id} has no dense {precision} figure")
        watts = self.board_power_w if power_w is None else power_w
        return watts / self.dense_tflops[precision]


@dataclass(frozen=True)
class Catalogue:
    version: str
    baseline: str
    generations: dict[str, Generation]

    def get(self, generation_id: str) -> Generation:
        try:
            return self.generations[generation_id]
        except KeyError:
            known = ", ".join(sorted(self.generations))
            raise CatalogueError(
                f"unknown generation {generation_id!r}; the catalogue knows: {known}"
            ) from None


def _decimal(value: Any, where: str) -> Decimal:
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise CatalogueError(f"{where}: expected a number, got {value!r}")
    try:
        number = Decimal(str(value))
    except InvalidOperation:
        raise CatalogueError(f"{where}: not a number: {value!r}") from None
    if not number.is_finite() or number <= 0:
        raise CatalogueError(f"{where}: must be a positive number, got {value!r}")
    if not MIN_FIGURE <= number <= MAX_FIGURE:  # 1e-999999 would overflow a ratio later
        raise CatalogueError(f"{where}: must be in [{MIN_FIGURE}, {MAX_FIGURE}], got {number}")
    return number


def _figures(raw: Any, where: str, allowed: tuple[str, ...] = PRECISIONS) -> dict[str, Decimal]:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: expected an object of precision -> TFLOPS")
    figures = {}
    for precision, value in raw.items():
        if precision not in allowed:
            raise CatalogueError(f"{where}: precision {precision!r} is not one of {allowed}")
        figures[precision] = _decimal(value, f"{where}.{precision}")
    return figures


def _check_dense(dense: dict[str, Decimal], sparse: dict[str, Decimal], where: str) -> None:
    """Each sparse figure is twice a dense one (else a sparse figure was entered as dense,
    or the reverse); an FP64 tensor path is never slower than the FP64 vector path."""
    for precision, figure in sparse.items():
        if precision not in dense:
            raise CatalogueError(
                f"{where}.sparse_tflops.{precision}: a sparse figure needs the dense one"
            )
        ratio = figure / dense[precision]
        if abs(ratio - SPARSITY_FACTOR) > SPARSITY_FACTOR * SPARSITY_TOLERANCE:
            raise CatalogueError(
                f"{where}.dense_tflops.{precision}: dense {dense[precision]} is not half the "
                f"sparse {figure} (ratio {ratio:.3f}); is a sparse figure listed as dense?"
            )
    tensor, vector = dense.get("FP64_TENSOR"), dense.get("FP64")
    if tensor is not None and (vector is None or tensor < vector):
        raise CatalogueError(
            f"{where}.dense_tflops.FP64_TENSOR: needs an FP64 figure no larger than it"
        )


def _text(entry: dict[str, Any], key: str, where: str) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value.strip():
        raise CatalogueError(f"{where}: {key!r} must be a non-empty string")
    return value


def _generation(entry: Any, index: int) -> Generation:
    where = f"generations[{index}]"
    if not isinstance(entry, dict):
        raise CatalogueError(f"{where}: expected an object")
    gid = _text(entry, "id", where)
    where = f"generation {gid!r}"
    dense = _figures(entry.get("dense_tflops"), f"{where}.dense_tflops")
    if not dense:
        raise CatalogueError(f"{where}: needs at least one dense TFLOPS figure")
    sparse = _figures(entry.get("sparse_tflops", {}), f"{where}.sparse_tflops", SPARSE_PRECISIONS)
    _check_dense(dense, sparse, where)
    return Generation(
        id=gid,
        family=_text(entry, "family", where),
        architecture=_text(entry, "architecture", where),
        form_factor=_text(entry, "form_factor", where),
        board_power_w=_decimal(entry.get("board_power_w"), f"{where}.board_power_w"),
        memory_gb=_decimal(entry.get("memory_gb"), f"{where}.memory_gb"),
        memory_bandwidth_gbs=_decimal(
            entry.get("memory_bandwidth_gbs"), f"{where}.memory_bandwidth_gbs"
        ),
        dense_tflops=dense,
        sparse_tflops=sparse,
        source=_text(entry, "source", where),
        nvml_names=_names(entry.get("nvml_names"), f"{where}.nvml_names"),
    )


def _names(value: Any, where: str) -> tuple[str, ...]:
    if (
        not isinstance(value, list)
        or not value
        or not all(isinstance(n, str) and n.strip() for n in value)
    ):
        raise CatalogueError(f"{where}: must list the names NVML reports, non-empty strings")
    return tuple(value)


def parse_catalogue(data: Any) -> Catalogue:
    if not isinstance(data, dict) or data.get("schema") != SCHEMA:
        raise CatalogueError(f'not a catalogue: expected "schema": {SCHEMA!r}')
    raw = data.get("generations")
    if not isinstance(raw, list) or not raw:
        raise CatalogueError("catalogue has no generations")
    generations: dict[str, Generation] = {}
    for index, entry in enumerate(raw):
        generation = _generation(entry, index)
        if generation.id in generations:
            raise CatalogueError(f"duplicate generation id {generation.id!r}")
        generations[generation.id] = generation
    baseline = data.get("baseline")
    if baseline not in generations:
        raise CatalogueError(f"baseline {baseline!r} is not a generation in the catalogue")
    version = data.get("version")
    if not isinstance(version, str) or not version:
        raise CatalogueError("catalogue needs a version string")
    return Catalogue(version=version, baseline=baseline, generations=generations)


def load_catalogue(path: Path | str = DEFAULT_PATH) -> Catalogue:
    path = Path(path)
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise CatalogueError(f"cannot read catalogue {path}: {exc.strerror}") from None
    if len(raw) > MAX_CATALOGUE_BYTES:
        raise CatalogueError(f"catalogue {path} is larger than {MAX_CATALOGUE_BYTES} bytes")
    try:
        data = json.loads(raw, parse_float=Decimal)
    except (ValueError, UnicodeDecodeError) as exc:
        raise CatalogueError(f"catalogue {path} is not valid JSON: {exc}") from None
    return parse_catalogue(data)
