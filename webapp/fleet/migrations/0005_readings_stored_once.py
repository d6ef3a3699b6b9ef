"""Readings stored once: TelemetrySample keyed by (GPU, instant), without the surrogate id and
its two extra indexes, and on PostgreSQL partitioned by day of `t_ms` (webapp/fleet/
partitions.py). The rows are copied from the old table; the batches' own copies of their
readings are folded into it by attestation 0004."""

from __future__ import annotations

import django.db.models.deletion
from django.db import migrations, models

from webapp.fleet.partitions import MS_PER_DAY, TABLE, create_sql

OLD = f"{TABLE}_old"
COLUMNS = "gpu_id, t_ms, energy_mj, power_mw, util_gpu_pct, util_mem_pct, temp_c"


def set_old_table_aside(apps, schema_editor):
    schema_editor.execute(f"ALTER TABLE {TABLE} RENAME TO {OLD}")


def create_and_copy(apps, schema_editor):
    model = apps.get_model("fleet", "TelemetrySample")
    if schema_editor.connection.vendor == "postgresql":
        sql, params = schema_editor.table_sql(model)
        schema_editor.execute(sql + " PARTITION BY RANGE (t_ms)", params or None)
        with schema_editor.connection.cursor() as cursor:
            cursor.execute(f"SELECT DISTINCT t_ms - (t_ms %% %s) FROM {OLD}", [MS_PER_DAY])
            for (day,) in cursor.fetchall():
                cursor.execute(create_sql(day))
    else:
        schema_editor.create_model(model)
    schema_editor.execute(f"INSERT INTO {TABLE} ({COLUMNS}) SELECT {COLUMNS} FROM {OLD}")
    schema_editor.execute(f"DROP TABLE {OLD}")


class Migration(migrations.Migration):
    atomic = True

    dependencies = [
        ("fleet", "0004_site_rates_from_the_rate_card"),
    ]

    operations = [
        migrations.RunPython(set_old_table_aside, elidable=False),
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.DeleteModel(name="TelemetrySample"),
                migrations.CreateModel(
                    name="TelemetrySample",
                    fields=[
                        ("pk", models.CompositePrimaryKey("gpu", "t_ms", blank=True, editable=False, primary_key=True, serialize=False)),
                        ("t_ms", models.BigIntegerField(help_text="Unix time, milliseconds")),
                        ("energy_mj", models.PositiveBigIntegerField(help_text="total-energy counter, millijoules")),
                        ("power_mw", models.PositiveIntegerField()),
                        ("util_gpu_pct", models.PositiveSmallIntegerField(help_text="share of time a kernel ran")),
                        ("util_mem_pct", models.PositiveSmallIntegerField(help_text="memory-bandwidth utilisation")),
                        ("temp_c", models.SmallIntegerField()),
                        ("gpu", models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name="samples", to="fleet.gpu")),
                    ],
                    options={
                        "ordering": ["-t_ms"],
                        "indexes": [models.Index(fields=["t_ms"], name="sample_t_ms")],
                    },
                ),
            ],
        ),
        migrations.RunPython(create_and_copy, elidable=False),
    ]
