"""The generation catalogue: datasheet facts per GPU generation, loaded from a versioned
data file (`ledger/data/catalogue-v1.json`, ledger data the contract checks lease terms
against) that an operator can extend.

Every figure is a Decimal so the pricing arithmetic never touches binary floating point.
Dense and sparse peaks are kept apart; only dense figures are used for pricing.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any

SCHEMA = "wattlease.catalogue/1"
PRECISIONS = ("FP32", "TF32", "BF16", "FP16", "FP8")
DEFAULT_PATH = Path(__file__).resolve().parents[1] / "ledger" / "data" / "catalogue-v1.json"
MAX_CATALOGUE_BYTES = 1 << 20


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
    return number


def _figures(raw: Any, where: str) -> dict[str, Decimal]:
    if not isinstance(raw, dict):
        raise CatalogueError(f"{where}: expected an object of precision -> TFLOPS")
    figures = {}
    for precision, value in raw.items():
        if precision not in PRECISIONS:
            raise CatalogueError(f"{where}: unknown precision {precision!r} ({PRECISIONS})")
        figures[precision] = _decimal(value, f"{where}.{precision}")
    return figures


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
        sparse_tflops=_figures(entry.get("sparse_tflops", {}), f"{where}.sparse_tflops"),
        source=_text(entry, "source", where),
    )


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
