"""Copy the versioned generation catalogue (ledger/data) into the database."""

from __future__ import annotations

from django.db import transaction

from scheduler.catalogue import Catalogue, load_catalogue
from webapp.fleet.models import Generation


def _figures(figures: dict) -> dict[str, str]:
    return {precision: str(value) for precision, value in figures.items()}


@transaction.atomic
def sync_catalogue(catalogue: Catalogue | None = None) -> int:
    """Create or update one Generation row per catalogue entry; returns how many."""
    catalogue = catalogue or load_catalogue()
    for gen in catalogue.generations.values():
        Generation.objects.update_or_create(
            catalogue_id=gen.id,
            defaults={
                "catalogue_version": catalogue.version,
                "family": gen.family,
                "architecture": gen.architecture,
                "form_factor": gen.form_factor,
                "board_power_w": gen.board_power_w,
                "memory_gb": gen.memory_gb,
                "memory_bandwidth_gbs": gen.memory_bandwidth_gbs,
                "dense_tflops": _figures(gen.dense_tflops),
                "sparse_tflops": _figures(gen.sparse_tflops),
                "source": gen.source,
            },
        )
    return len(catalogue.generations)
