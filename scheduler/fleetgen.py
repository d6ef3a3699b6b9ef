"""Seeded synthetic plan inputs (fleet + running leases + queue) for the demo, the
benchmark and the quality tests. Same seed, same instance."""

from __future__ import annotations

import random

from scheduler.catalogue import PRECISIONS, Catalogue

GPUS_PER_NODE = 8
SITE_PUES = ("1.10", "1.25", "1.40", "1.58")
SITE_TARIFFS = ("0.08", "0.11", "0.14", "0.19")
MEMORY_BOUND = ("0", "0", "0", "0.25", "0.5", "1")  # half the jobs declare a fraction


def synthetic_plan_input(
    catalogue: Catalogue,
    gpus: int,
    jobs: int,
    seed: int = 0,
    sites: int = 4,
    gpus_per_node: int = GPUS_PER_NODE,
    busy_fraction: float = 0.3,
    unattested_fraction: float = 0.02,
    max_job_gpus: int = 8,
) -> dict:
    """A plan input (the CLI's JSON schema, as Python objects) with `gpus` GPUs in nodes of
    `gpus_per_node` spread over `sites` sites and generations, some busy in leases."""
    rng = random.Random(seed)
    generations = sorted(catalogue.generations)
    site_rows = [
        {"id": f"site-{s}", "pue": SITE_PUES[s % 4], "tariff_per_kwh": SITE_TARIFFS[s % 4]}
        for s in range(sites)
    ]
    gpu_rows, leases = [], []
    node_count = (gpus + gpus_per_node - 1) // gpus_per_node
    made = 0
    for n in range(node_count):
        site = site_rows[n % sites]["id"]
        gen = generations[rng.randrange(len(generations))]
        busy_node = rng.random() < busy_fraction
        on_node = []
        for k in range(min(gpus_per_node, gpus - made)):
            row = {
                "id": f"gpu-{n:05d}-{k}",
                "generation": gen,
                "node": f"node-{n:05d}",
                "site": site,
                "free": not busy_node,
                "attested": rng.random() >= unattested_fraction,
            }
            if rng.random() < 0.5:
                row["temp_c"] = rng.randrange(45, 92)
            if rng.random() < 0.3:
                board = catalogue.get(gen).board_power_w
                row["power_w"] = str(round(float(board) * rng.uniform(0.8, 1.05), 1))
            gpu_rows.append(row)
            on_node.append(row["id"])
            made += 1
        if busy_node:
            leases.append(
                {"id": f"lease-{n:05d}", "gpus": on_node, "priority": rng.randrange(0, 5)}
            )
    job_rows = []
    for j in range(jobs):
        size = rng.choice([g for g in (1, 2, 4, 8) if g <= max_job_gpus])
        job_rows.append(
            {
                "id": f"job-{j:06d}",
                "gpus": size,
                "precision": rng.choice(PRECISIONS),
                "hours": str(rng.randrange(1, 200) / 4),
                "priority": rng.randrange(0, 10),
                "min_memory_gb": rng.choice([0, 0, 0, 40, 80]),
                "single_node": size > 1 and rng.random() < 0.5,
                "memory_bound": rng.choice(MEMORY_BOUND),
            }
        )
    return {
        "tariff_per_kwh": "0.12",
        "sites": site_rows,
        "gpus": gpu_rows,
        "leases": leases,
        "jobs": job_rows,
    }
