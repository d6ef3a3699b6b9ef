"""A batch no longer keeps its own copy of its readings: they are the GPU's rows of
fleet.TelemetrySample between its first and last instant. Each batch's rows are folded into
that table (most are there already) and its text cleared once the table gives back exactly
those rows; a batch whose rows the table cannot give back keeps them, so nothing is lost.
The column becomes `evidence`: where a bill line's readings are kept when their day's
partition is dropped (webapp/leasing/retention.py)."""

from __future__ import annotations

from django.db import migrations, models

from webapp.fleet.partitions import MS_PER_DAY, create_sql

FIELDS = ("t_ms", "energy_mj", "power_mw", "util_gpu_pct", "util_mem_pct", "temp_c")


def _values(row: str) -> dict[str, int]:
    t_ms, _gpu, *rest = row.split(",")
    return dict(zip(FIELDS, map(int, [t_ms, *rest]), strict=True))


def fold_into_samples(apps, schema_editor):
    batch_model = apps.get_model("attestation", "TelemetryBatch")
    sample_model = apps.get_model("fleet", "TelemetrySample")
    postgres = schema_editor.connection.vendor == "postgresql"
    for batch in batch_model.objects.exclude(evidence="").select_related("gpu").iterator():
        rows = batch.evidence.splitlines()
        values = [_values(row) for row in rows]
        if postgres:
            for day in {v["t_ms"] - v["t_ms"] % MS_PER_DAY for v in values}:
                schema_editor.execute(create_sql(day))
        sample_model.objects.bulk_create(
            [sample_model(gpu_id=batch.gpu_id, **v) for v in values], ignore_conflicts=True
        )
        stored = sample_model.objects.filter(
            gpu_id=batch.gpu_id, t_ms__gte=batch.first_ms, t_ms__lte=batch.last_ms
        ).order_by("t_ms")
        again = [",".join(map(str, (s.t_ms, batch.gpu.uuid, *[getattr(s, f) for f in FIELDS[1:]]))) for s in stored]
        if again == rows:
            batch.evidence = ""
            batch.save(update_fields=["evidence"])


class Migration(migrations.Migration):
    dependencies = [
        ("attestation", "0003_telemetrybatch"),
        ("fleet", "0005_readings_stored_once"),
    ]

    operations = [
        migrations.RenameField(model_name="telemetrybatch", old_name="readings", new_name="evidence"),
        migrations.AlterField(
            model_name="telemetrybatch",
            name="evidence",
            field=models.TextField(
                blank=True,
                default="",
                help_text="empty while the readings are in fleet.TelemetrySample; the canonical "
                "CSV rows, copied here when their day is dropped while a bill line cites them",
            ),
        ),
        migrations.AddIndex(
            model_name="telemetrybatch",
            index=models.Index(fields=["first_ms"], name="batch_first_ms"),
        ),
        migrations.RunPython(fold_into_samples, elidable=False),
    ]
