"""Energy-attribution pricing: the one module that owns the arithmetic of a price.

Unit of work. A job's `hours` are wall-clock hours on `gpus` GPUs of the *baseline*
generation at the job's precision. The work is therefore

    work [TFLOPS·h] = gpus x hours x baseline dense TFLOPS(precision)

and a faster generation needs proportionally fewer GPU-hours for it. When the baseline has
no figure at a precision (a V100 has no BF16, TF32, FP8 or INT8 tensor path), the
baseline's REFERENCE_PRECISION (FP16 tensor) figure stands in: "hours of V100 tensor work";
for FP64_TENSOR its FP64 (vector) figure does (BASELINE_STAND_INS): "hours of V100 FP64
work", the path a V100 runs a DGEMM on.

Runtime. A job may declare `memory_bound` (f, default 0: compute-bound), the fraction of
its baseline runtime that is limited by memory bandwidth rather than by math. That part
speeds up with the bandwidth ratio, the rest with the throughput ratio at the precision:

    runtime on G [h] = hours x ((1 - f) x TFLOPS_base(p) / TFLOPS_G(p) + f x BW_base / BW_G)

so the generation's effective throughput for the job is

    TFLOPS_eff(G, p, f) = TFLOPS_base(p) / ((1 - f) x TFLOPS_base(p) / TFLOPS_G(p)
                                            + f x BW_base / BW_G)

which is the dense datasheet peak for f = 0 (docs/scheduler.md has a worked example).

Energy attributed to a GPU that does a share of the work is

    energy [kWh] = share [TFLOPS·h] x W/TFLOPS(generation, precision) x derating / 1000

where W/TFLOPS is power / TFLOPS_eff, with the measured power draw when telemetry has one
(datasheet board power otherwise), and `derating` raises it when the GPU runs hotter than
the threshold. The site's PUE turns GPU energy into facility energy, and the tariff turns
that into money. The coefficient (baseline W/TFLOPS / this W/TFLOPS) is what the seed
calls the attribution weight: the factor by which this GPU needs less energy than the
baseline for the same work.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import ROUND_HALF_EVEN, Decimal

from ledger.money import from_micro
from ledger.units import MJ_PER_KWH, MW_PER_W  # the search ranks GPUs by power in integer mW
from scheduler.catalogue import Catalogue, CatalogueError, Generation

REFERENCE_PRECISION = "FP16"
BASELINE_STAND_INS = {"FP64_TENSOR": "FP64"}  # precision -> the baseline's figure used first
TEMP_DERATE_THRESHOLD_C = Decimal("80")  # °C: above this, efficiency is derated
DERATE_PER_DEGREE = Decimal("0.01")  # fraction added to W/TFLOPS per °C above threshold
MAX_DERATING = Decimal("1.5")  # a sensor stuck at 150 °C must not price a GPU at 8x
MONEY_QUANTUM = from_micro(1)  # currency units: one of the ledger's micro-units
ENERGY_QUANTUM_KWH = Decimal("0.000001")  # displayed energy: 1 mWh
RATE_QUANTUM = Decimal("0.0001")  # displayed coefficients, derating, W/TFLOPS
WH_PER_KWH = Decimal(1000)
MAX_POWER_W = Decimal(5000)  # a measured draw above this is a broken sensor, not a GPU
MIN_PUE = Decimal(1)
MAX_PUE = Decimal(5)
COMPUTE_BOUND = Decimal(0)  # memory_bound fraction of a job that declares none
MAX_MEMORY_BOUND = Decimal(1)


class PricingError(ValueError):
    """A price cannot be computed; the message names the GPU, generation or precision."""


@dataclass(frozen=True)
class PricingPolicy:
    """Operator-configurable knobs. `baseline` None means the catalogue's own baseline."""

    baseline: str | None = None
    temp_derate_threshold_c: Decimal = TEMP_DERATE_THRESHOLD_C
    derate_per_degree: Decimal = DERATE_PER_DEGREE
    max_derating: Decimal = MAX_DERATING


@dataclass(frozen=True)
class GpuCondition:
    """What pricing needs to know about one candidate GPU right now."""

    gpu: str
    generation: str
    pue: Decimal
    tariff_per_kwh: Decimal
    power_w: Decimal | None = None  # measured draw under load, from telemetry
    temp_c: Decimal | None = None


@dataclass(frozen=True)
class GpuLine:
    gpu: str
    generation: str
    w_per_tflops: Decimal
    power_source: str  # "measured" or "datasheet"
    coefficient: Decimal
    derating: Decimal
    pue: Decimal
    tariff_per_kwh: Decimal
    gpu_hours: Decimal
    attributed_power_w: Decimal  # what the lease assumes this GPU draws (settlement basis)
    energy_kwh: Decimal  # at the board
    facility_energy_kwh: Decimal  # x PUE
    cost: Decimal

    def as_dict(self) -> dict[str, str]:
        return {k: str(v) for k, v in self.__dict__.items()}


@dataclass(frozen=True)
class PriceBreakdown:
    precision: str
    baseline: str
    baseline_w_per_tflops: Decimal
    work_tflops_h: Decimal
    baseline_energy_kwh: Decimal
    coefficient: Decimal  # effective over the set: baseline energy / datasheet-power energy
    derating: Decimal  # effective: derated energy / underated energy
    pue: Decimal  # effective: facility energy / board energy
    energy_kwh: Decimal
    energy_attributed_mj: int  # board energy in integer mJ, as the ledger stores it
    facility_energy_kwh: Decimal
    tariff_per_kwh: Decimal  # effective: total / facility energy
    total: Decimal
    lines: tuple[GpuLine, ...] = field(default=())
    memory_bound: Decimal = COMPUTE_BOUND  # the job's declared fraction (runtime model)

    def as_dict(self) -> dict[str, object]:
        """JSON-ready; `memory_bound` appears only when the job declared one, so a
        compute-bound price reads exactly as it did before the runtime model had it."""
        out: dict[str, object] = {
            k: (v if isinstance(v, int) else str(v))
            for k, v in self.__dict__.items()
            if k not in ("lines", "memory_bound")
        }
        if self.memory_bound:
            out["memory_bound"] = str(self.memory_bound)
        out["lines"] = [line.as_dict() for line in self.lines]
        return out


def _q(value: Decimal, quantum: Decimal) -> Decimal:
    return value.quantize(quantum, rounding=ROUND_HALF_EVEN)


def kwh_to_mj(kwh: Decimal) -> int:
    """Energy in integer millijoules (half-even), the unit where pricing meets the ledger."""
    return int((kwh * MJ_PER_KWH).to_integral_value(rounding=ROUND_HALF_EVEN))


class Pricer:
    """Prices work on GPUs against one catalogue and policy. Caches per-precision figures."""

    def __init__(self, catalogue: Catalogue, policy: PricingPolicy | None = None) -> None:
        self.catalogue = catalogue
        self.policy = policy or PricingPolicy()
        self.baseline: Generation = catalogue.get(self.policy.baseline or catalogue.baseline)
        self._reference: dict[str, tuple[Decimal, Decimal]] = {}  # precision -> (TFLOPS, W/TF)

    def _baseline_precision(self, precision: str) -> str:
        stand_in = BASELINE_STAND_INS.get(precision, REFERENCE_PRECISION)
        for candidate in (precision, stand_in, REFERENCE_PRECISION):
            if self.baseline.supports(candidate):
                return candidate
        raise PricingError(
            f"baseline {self.baseline.id} has neither {precision} nor {REFERENCE_PRECISION}"
        )

    def _baseline_figures(self, precision: str) -> tuple[Decimal, Decimal]:
        figures = self._reference.get(precision)
        if figures is None:
            reference = self._baseline_precision(precision)
            figures = (
                self.baseline.dense_tflops[reference],
                self.baseline.watts_per_tflops(reference),
            )
            self._reference[precision] = figures
        return figures

    def baseline_tflops(self, precision: str) -> Decimal:
        """Throughput that defines one hour of work at `precision` (module docstring)."""
        return self._baseline_figures(precision)[0]

    def baseline_w_per_tflops(self, precision: str) -> Decimal:
        return self._baseline_figures(precision)[1]

    def generation(self, generation_id: str, precision: str) -> Generation:
        try:
            gen = self.catalogue.get(generation_id)
        except CatalogueError as exc:
            raise PricingError(str(exc)) from None
        if not gen.supports(precision):
            raise PricingError(f"generation {gen.id} has no dense {precision} figure")
        return gen

    def coefficient(
        self, generation_id: str, precision: str, power_w: Decimal | None = None
    ) -> Decimal:
        """Baseline W/TFLOPS divided by this generation's W/TFLOPS at `precision`."""
        gen = self.generation(generation_id, precision)
        return self.baseline_w_per_tflops(precision) / gen.watts_per_tflops(precision, power_w)

    def throughput(
        self, gen: Generation, precision: str, memory_bound: Decimal = COMPUTE_BOUND
    ) -> Decimal:
        """TFLOPS_eff: what `gen` delivers to a job at `precision` that spends the fraction
        `memory_bound` of its baseline runtime waiting on memory (module docstring)."""
        dense = gen.dense_tflops[precision]
        if not memory_bound:
            return dense  # compute-bound: the datasheet's dense peak, exactly
        if not COMPUTE_BOUND <= memory_bound <= MAX_MEMORY_BOUND:
            raise PricingError(f"memory_bound must be in [0, 1], got {memory_bound}")
        base = self.baseline_tflops(precision)
        bandwidth = self.baseline.memory_bandwidth_gbs / gen.memory_bandwidth_gbs
        return base / ((1 - memory_bound) * base / dense + memory_bound * bandwidth)

    def runtime_hours(
        self, generation_id: str, precision: str, hours: Decimal, memory_bound: Decimal
    ) -> Decimal:
        """Wall-clock hours on one GPU of `generation_id` for `hours` baseline hours."""
        gen = self.generation(generation_id, precision)
        return self.work(precision, hours) / self.throughput(gen, precision, memory_bound)

    def derating(self, temp_c: Decimal | None) -> Decimal:
        """Multiplier (>= 1) on W/TFLOPS for a GPU running above the temperature threshold."""
        if temp_c is None or temp_c <= self.policy.temp_derate_threshold_c:
            return Decimal(1)
        excess = temp_c - self.policy.temp_derate_threshold_c
        return min(Decimal(1) + excess * self.policy.derate_per_degree, self.policy.max_derating)

    def attributed_power_w(
        self, gen: Generation, power_w: Decimal | None, temp_c: Decimal | None
    ) -> Decimal:
        """What a GPU is taken to draw: measured (else board) power x temperature derating."""
        power = gen.board_power_w if power_w is None else power_w
        return power * self.derating(temp_c)

    def power_key(self, generation_id: str, power_w: Decimal | None, temp_c: Decimal | None) -> int:
        """Attributed power in integer mW: within one pool (one PUE, tariff and datasheet)
        the only thing that makes one GPU cheaper than another, at every precision."""
        power = self.attributed_power_w(self.catalogue.get(generation_id), power_w, temp_c)
        return int((power * MW_PER_W).to_integral_value(rounding=ROUND_HALF_EVEN))

    def work(self, precision: str, hours: Decimal) -> Decimal:
        """Per-GPU work of a job of `hours` baseline hours (TFLOPS·h, module docstring)."""
        return hours * self.baseline_tflops(precision)

    def rate(
        self,
        gen: Generation,
        precision: str,
        pue: Decimal,
        tariff_per_kwh: Decimal,
        memory_bound: Decimal = COMPUTE_BOUND,
    ) -> Decimal:
        """The search's pool rate: money per (mW of power key x TFLOPS·h of per-GPU work),
        up to the constant 1 / (MW_PER_W x WH_PER_KWH). energy x PUE x tariff, as `price`."""
        return pue * tariff_per_kwh / self.throughput(gen, precision, memory_bound)

    def capacity_rate(
        self,
        gen: Generation,
        precision: str,
        capacity_micro_per_gpu_hour: int,
        memory_bound: Decimal = COMPUTE_BOUND,
    ) -> Decimal:
        """The capacity part in the same search units as `rate` x a power key: a GPU held
        for the work's runtime (work / TFLOPS_eff hours) at the hourly rate, in micro-units,
        is MW_PER_W x WH_PER_KWH times the money, the constant `rate` leaves out."""
        return Decimal(capacity_micro_per_gpu_hour) / self.throughput(gen, precision, memory_bound)

    @staticmethod
    def search_cost(
        work: Decimal, power: Decimal | int, rate: Decimal, capacity: Decimal | int = 0
    ) -> Decimal:
        """The search's ranking key for a GPU set: per-GPU work x (summed power keys x the
        pool's rate + the set's capacity rate, GPUs x `capacity_rate`). Proportional to what
        the tenant pays, capacity plus energy (same constant for every option)."""
        return work * (power * rate + capacity)

    def w_per_tflops(
        self, gen: Generation, precision: str, power_w: Decimal | None, memory_bound: Decimal
    ) -> Decimal:
        """Measured (else board) power per effective TFLOPS for the job."""
        watts = gen.board_power_w if power_w is None else power_w
        return watts / self.throughput(gen, precision, memory_bound)

    def effective_w_per_tflops(
        self, cond: GpuCondition, precision: str, memory_bound: Decimal = COMPUTE_BOUND
    ) -> Decimal:
        """W/TFLOPS at the facility meter: measured or datasheet power, derated, x PUE."""
        gen = self.generation(cond.generation, precision)
        wpt = self.w_per_tflops(gen, precision, cond.power_w, memory_bound)
        return wpt * self.derating(cond.temp_c) * cond.pue

    def unit_cost(
        self, cond: GpuCondition, precision: str, memory_bound: Decimal = COMPUTE_BOUND
    ) -> Decimal:
        """Money per TFLOPS·h of work on this GPU (what the MILP reference minimises)."""
        wpt = self.effective_w_per_tflops(cond, precision, memory_bound)
        return wpt * cond.tariff_per_kwh / WH_PER_KWH

    def price(
        self,
        precision: str,
        gpus: int,
        hours: Decimal,
        on: list[GpuCondition],
        memory_bound: Decimal = COMPUTE_BOUND,
    ) -> PriceBreakdown:
        """Price `gpus` x `hours` baseline GPU-hours of work at `precision`, spread evenly
        over the GPUs in `on` (which must hold exactly `gpus` entries), for a job that is
        memory-bound for the fraction `memory_bound` of its baseline runtime."""
        if gpus < 1 or len(on) != gpus:
            raise PricingError(f"a job for {gpus} GPUs was offered {len(on)} GPUs")
        if hours < 0:
            raise PricingError(f"hours must not be negative, got {hours}")
        work = gpus * hours * self.baseline_tflops(precision)
        share = work / gpus
        raw = [self._line(cond, precision, share, memory_bound) for cond in on]
        return self._aggregate(precision, work, raw, memory_bound)

    def _line(
        self, cond: GpuCondition, precision: str, share: Decimal, memory_bound: Decimal
    ) -> tuple[GpuLine, Decimal, Decimal, Decimal]:
        """The displayed line (rates to 4 places, energy to 1 mWh, cost to the money
        quantum) and the unrounded board, underated and facility energy behind it."""
        gen = self.generation(cond.generation, precision)
        wpt = self.w_per_tflops(gen, precision, cond.power_w, memory_bound)
        derating = self.derating(cond.temp_c)
        underated = share * wpt / WH_PER_KWH
        energy = underated * derating
        facility = energy * cond.pue
        line = GpuLine(
            gpu=cond.gpu,
            generation=gen.id,
            w_per_tflops=_q(wpt, RATE_QUANTUM),
            power_source="datasheet" if cond.power_w is None else "measured",
            coefficient=_q(self.baseline_w_per_tflops(precision) / wpt, RATE_QUANTUM),
            derating=_q(derating, RATE_QUANTUM),
            pue=cond.pue,
            tariff_per_kwh=cond.tariff_per_kwh,
            gpu_hours=_q(share / self.throughput(gen, precision, memory_bound), ENERGY_QUANTUM_KWH),
            attributed_power_w=_q(
                self.attributed_power_w(gen, cond.power_w, cond.temp_c), RATE_QUANTUM
            ),
            energy_kwh=_q(energy, ENERGY_QUANTUM_KWH),
            facility_energy_kwh=_q(facility, ENERGY_QUANTUM_KWH),
            cost=_q(facility * cond.tariff_per_kwh, MONEY_QUANTUM),
        )
        return line, energy, underated, facility

    def _aggregate(
        self,
        precision: str,
        work: Decimal,
        raw: list[tuple[GpuLine, Decimal, Decimal, Decimal]],
        memory_bound: Decimal,
    ) -> PriceBreakdown:
        base_wpt = self.baseline_w_per_tflops(precision)
        baseline_energy = work * base_wpt / WH_PER_KWH
        energy = sum((r[1] for r in raw), Decimal(0))
        underated = sum((r[2] for r in raw), Decimal(0))
        facility = sum((r[3] for r in raw), Decimal(0))
        total = sum((r[0].cost for r in raw), Decimal(0))

        def ratio(a: Decimal, b: Decimal) -> Decimal:
            return _q(a / b, RATE_QUANTUM) if b else Decimal(0)

        return PriceBreakdown(
            precision=precision,
            baseline=self.baseline.id,
            baseline_w_per_tflops=_q(base_wpt, RATE_QUANTUM),
            work_tflops_h=work,
            baseline_energy_kwh=_q(baseline_energy, ENERGY_QUANTUM_KWH),
            coefficient=ratio(baseline_energy, underated),
            derating=ratio(energy, underated),
            pue=ratio(facility, energy),
            energy_kwh=_q(energy, ENERGY_QUANTUM_KWH),
            energy_attributed_mj=kwh_to_mj(energy),
            facility_energy_kwh=_q(facility, ENERGY_QUANTUM_KWH),
            tariff_per_kwh=ratio(total, facility),
            total=total,
            lines=tuple(r[0] for r in raw),
            memory_bound=memory_bound,
        )
