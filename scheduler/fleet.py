"""The planner's input: fleet, sites, running leases and queued jobs, validated from
untrusted JSON. Every error names the entry (`jobs[3] 'train-7'`) and the field."""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from scheduler.catalogue import PRECISIONS, Catalogue
from scheduler.pricing import COMPUTE_BOUND, MAX_MEMORY_BOUND, MAX_POWER_W, MAX_PUE, MIN_PUE

MAX_ID_CHARS = 128
MAX_NUMBER_CHARS = 64  # a decimal string longer than this is not a price or a duration
MAX_GPUS = 200_000
MAX_JOBS = 1_000_000
MAX_LEASES = 200_000
MAX_GPUS_PER_JOB = 4096
MAX_HOURS = Decimal(24 * 366)  # a queued job of more than a year is a typo
MAX_PRIORITY = 1_000_000
MIN_TEMP_C = Decimal(-40)
MAX_TEMP_C = Decimal(150)
MAX_MEMORY_GB = Decimal(100_000)
DEFAULT_TARIFF_PER_KWH = Decimal("0.10")
MAX_TARIFF_PER_KWH = Decimal(1000)


class PlanInputError(ValueError):
    """The plan input is invalid; the message names the entry and the field."""


@dataclass(frozen=True, slots=True)
class Site:
    id: str
    pue: Decimal
    tariff_per_kwh: Decimal


@dataclass(frozen=True, slots=True)
class Gpu:
    id: str
    generation: str
    node: str
    site: str
    free: bool
    attested: bool
    temp_c: Decimal | None = None
    power_w: Decimal | None = None


@dataclass(frozen=True, slots=True)
class Job:
    id: str
    gpus: int
    precision: str
    hours: Decimal
    priority: int
    min_memory_gb: Decimal = Decimal(0)
    single_node: bool = False
    memory_bound: Decimal = COMPUTE_BOUND  # fraction of baseline runtime bound by bandwidth


@dataclass(frozen=True, slots=True)
class Lease:
    """A running lease on busy GPUs; a higher-priority job may preempt it."""

    id: str
    gpus: tuple[str, ...]
    priority: int


@dataclass(frozen=True)
class PlanInput:
    gpus: tuple[Gpu, ...]
    sites: dict[str, Site]
    jobs: tuple[Job, ...]
    leases: tuple[Lease, ...] = ()


class _Where:
    """Names an entry in error messages; built lazily, only when an error is raised."""

    __slots__ = ("entry", "index", "kind")

    def __init__(self, kind: str, index: int, entry: Any) -> None:
        self.kind, self.index, self.entry = kind, index, entry

    def __str__(self) -> str:
        name = self.entry.get("id") if isinstance(self.entry, dict) else None
        if isinstance(name, str):
            return f"{self.kind}[{self.index}] {name[:MAX_ID_CHARS]!r}"
        return f"{self.kind}[{self.index}]"

    def __format__(self, spec: str) -> str:
        return format(str(self), spec)


def _id(entry: dict[str, Any], key: str, where: object) -> str:
    value = entry.get(key)
    if not isinstance(value, str) or not value or len(value) > MAX_ID_CHARS:
        raise PlanInputError(f"{where}: {key!r} must be a string of 1-{MAX_ID_CHARS} characters")
    return value


def _bool(entry: dict[str, Any], key: str, where: object, default: bool | None = None) -> bool:
    value = entry.get(key, default)
    if not isinstance(value, bool):
        raise PlanInputError(f"{where}: {key!r} must be true or false, got {_show(value)}")
    return value


def _int(entry: dict[str, Any], key: str, where: object, lo: int, hi: int) -> int:
    value = entry.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not lo <= value <= hi:
        raise PlanInputError(
            f"{where}: {key!r} must be an integer in [{lo}, {hi}], got {_show(value)}"
        )
    return value


def _number(
    entry: dict[str, Any], key: str, where: object, lo: Decimal, hi: Decimal, default: Any = None
) -> Decimal:
    value = entry.get(key, default)
    if isinstance(value, bool) or not isinstance(value, (int, float, str, Decimal)):
        raise PlanInputError(f"{where}: {key!r} must be a number, got {_show(value)}")
    if isinstance(value, str) and len(value) > MAX_NUMBER_CHARS:
        raise PlanInputError(f"{where}: {key!r} is longer than {MAX_NUMBER_CHARS} characters")
    try:
        # int and Decimal convert exactly; float goes through its shortest repr ("0.1").
        number = Decimal(value) if isinstance(value, (int, Decimal)) else Decimal(str(value))
    except InvalidOperation:
        raise PlanInputError(f"{where}: {key!r} is not a number: {_show(value)}") from None
    if not number.is_finite() or not lo <= number <= hi:
        raise PlanInputError(f"{where}: {key!r} must be in [{lo}, {hi}], got {_show(number)}")
    return number


def _show(value: object) -> str:
    """A bounded rendering of an untrusted value for an error message."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 128:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value) if not isinstance(value, Decimal) else str(value)
    return text if len(text) <= 40 else text[:40] + "..."


def _optional(entry: dict[str, Any], key: str, where: object, lo: Decimal, hi: Decimal):
    return None if entry.get(key) is None else _number(entry, key, where, lo, hi)


def _list(data: dict[str, Any], key: str, limit: int, required: bool = True) -> list[Any]:
    value = data.get(key, None if required else [])
    if not isinstance(value, list):
        raise PlanInputError(f"{key!r} must be a list")
    if len(value) > limit:
        raise PlanInputError(f"{key!r} has {len(value)} entries; the limit is {limit}")
    return value


def _object(entry: Any, where: object) -> dict[str, Any]:
    if not isinstance(entry, dict):
        raise PlanInputError(f"{where}: expected an object")
    return entry


def _unique(seen: set[str], value: str, where: object, kind: str) -> None:
    if value in seen:
        raise PlanInputError(f"{where}: duplicate {kind} id {value!r}")
    seen.add(value)


def _site(entry: Any, index: int, default_tariff: Decimal) -> Site:
    where = _Where("sites", index, entry)
    entry = _object(entry, where)
    return Site(
        id=_id(entry, "id", where),
        pue=_number(entry, "pue", where, MIN_PUE, MAX_PUE),
        tariff_per_kwh=_number(
            entry, "tariff_per_kwh", where, Decimal(0), MAX_TARIFF_PER_KWH, default_tariff
        ),
    )


def _gpu(entry: Any, index: int, catalogue: Catalogue, sites: dict[str, Site]) -> Gpu:
    where = _Where("gpus", index, entry)
    entry = _object(entry, where)
    generation = _id(entry, "generation", where)
    if generation not in catalogue.generations:
        known = ", ".join(sorted(catalogue.generations))
        raise PlanInputError(f"{where}: unknown generation {generation!r} (known: {known})")
    site = _id(entry, "site", where)
    if site not in sites:
        raise PlanInputError(f"{where}: site {site!r} is not in 'sites'")
    return Gpu(
        id=_id(entry, "id", where),
        generation=generation,
        node=_id(entry, "node", where),
        site=site,
        free=_bool(entry, "free", where),
        attested=_bool(entry, "attested", where),
        temp_c=_optional(entry, "temp_c", where, MIN_TEMP_C, MAX_TEMP_C),
        power_w=_optional(entry, "power_w", where, Decimal("0.001"), MAX_POWER_W),
    )


def _job(entry: Any, index: int) -> Job:
    where = _Where("jobs", index, entry)
    entry = _object(entry, where)
    precision = entry.get("precision")
    if precision not in PRECISIONS:
        raise PlanInputError(f"{where}: unknown precision {_show(precision)} (known: {PRECISIONS})")
    return Job(
        id=_id(entry, "id", where),
        gpus=_int(entry, "gpus", where, 1, MAX_GPUS_PER_JOB),
        precision=precision,
        hours=_number(entry, "hours", where, Decimal(0), MAX_HOURS),
        priority=_int(entry, "priority", where, -MAX_PRIORITY, MAX_PRIORITY),
        min_memory_gb=_number(entry, "min_memory_gb", where, Decimal(0), MAX_MEMORY_GB, 0),
        single_node=_bool(entry, "single_node", where, False),
        memory_bound=_number(
            entry, "memory_bound", where, COMPUTE_BOUND, MAX_MEMORY_BOUND, COMPUTE_BOUND
        ),
    )


def _lease(entry: Any, index: int, gpus: dict[str, Gpu], taken: set[str]) -> Lease:
    where = _Where("leases", index, entry)
    entry = _object(entry, where)
    ids = entry.get("gpus")
    if not isinstance(ids, list) or not 1 <= len(ids) <= MAX_GPUS_PER_JOB:
        raise PlanInputError(f"{where}: 'gpus' must be a list of 1-{MAX_GPUS_PER_JOB} GPU ids")
    for gpu_id in ids:
        gpu = gpus.get(gpu_id) if isinstance(gpu_id, str) else None
        if gpu is None:
            raise PlanInputError(f"{where}: GPU {_show(gpu_id)} is not in 'gpus'")
        if gpu.free:
            raise PlanInputError(f"{where}: GPU {gpu_id!r} is leased but marked free")
        _unique(taken, gpu_id, where, "leased GPU")
    return Lease(
        id=_id(entry, "id", where),
        gpus=tuple(ids),
        priority=_int(entry, "priority", where, -MAX_PRIORITY, MAX_PRIORITY),
    )


def parse_plan_input(data: Any, catalogue: Catalogue) -> PlanInput:
    """Validate a decoded JSON plan input (numbers may be Decimal, int or numeric strings)."""
    if not isinstance(data, dict):
        raise PlanInputError("plan input must be a JSON object")
    tariff = _number(
        data, "tariff_per_kwh", "input", Decimal(0), MAX_TARIFF_PER_KWH, DEFAULT_TARIFF_PER_KWH
    )
    sites: dict[str, Site] = {}
    for index, entry in enumerate(_list(data, "sites", MAX_GPUS)):
        site = _site(entry, index, tariff)
        if site.id in sites:
            raise PlanInputError(f"{_Where('sites', index, entry)}: duplicate site id {site.id!r}")
        sites[site.id] = site
    gpus: dict[str, Gpu] = {}
    for index, entry in enumerate(_list(data, "gpus", MAX_GPUS)):
        gpu = _gpu(entry, index, catalogue, sites)
        if gpu.id in gpus:
            raise PlanInputError(f"{_Where('gpus', index, entry)}: duplicate GPU id {gpu.id!r}")
        gpus[gpu.id] = gpu
    jobs: list[Job] = []
    job_ids: set[str] = set()
    for index, entry in enumerate(_list(data, "jobs", MAX_JOBS)):
        job = _job(entry, index)
        _unique(job_ids, job.id, _Where("jobs", index, entry), "job")
        jobs.append(job)
    leases: list[Lease] = []
    lease_ids: set[str] = set()
    taken: set[str] = set()
    for index, entry in enumerate(_list(data, "leases", MAX_LEASES, required=False)):
        lease = _lease(entry, index, gpus, taken)
        _unique(lease_ids, lease.id, _Where("leases", index, entry), "lease")
        leases.append(lease)
    return PlanInput(tuple(gpus.values()), sites, tuple(jobs), tuple(leases))
