# Bill lines (docs/billing.md): lease terms on the lease, settlements as lines with evidence.
# Lines recorded under the energy-only model have no interval or capacity; they are dropped
# (the demo's database is re-seeded; the ledger keeps their history).

from django.db import migrations, models


def drop_old_lines(apps, schema_editor):
    apps.get_model("leasing", "Settlement").objects.all().delete()


class Migration(migrations.Migration):

    dependencies = [
        ("leasing", "0002_lease_interval_started"),
    ]

    operations = [
        migrations.RunPython(drop_old_lines, migrations.RunPython.noop),
        migrations.RemoveField(model_name="lease", name="attributed_energy_mj"),
        migrations.AddField(
            model_name="lease",
            name="terms",
            field=models.JSONField(
                blank=True,
                default=dict,
                help_text="the lease terms in force, as the ledger records them",
            ),
        ),
        migrations.AlterField(
            model_name="lease",
            name="price_total_micro",
            field=models.BigIntegerField(
                blank=True,
                help_text="the quotes: capacity + planned energy (docs/billing.md)",
                null=True,
            ),
        ),
        migrations.RemoveField(model_name="settlement", name="attributed_energy_mj"),
        migrations.RemoveField(model_name="settlement", name="amount_micro"),
        migrations.AlterField(
            model_name="settlement",
            name="measured_energy_mj",
            field=models.BigIntegerField(help_text="GPU energy measured, all GPUs"),
        ),
    ] + [
        migrations.AddField(
            model_name="settlement", name=name, field=field, preserve_default=False
        )
        for name, field in [
            ("start_ms", models.BigIntegerField(default=0)),
            ("end_ms", models.BigIntegerField(default=0)),
            ("pue_milli", models.PositiveIntegerField(default=1000)),
            ("capacity_micro_per_gpu_hour", models.PositiveBigIntegerField(default=0)),
            ("capacity_micro", models.BigIntegerField(default=0, help_text="GPU-hours held x rate")),
            (
                "priced_energy_micro",
                models.BigIntegerField(default=0, help_text="the interval's prepaid energy"),
            ),
            (
                "measured_energy_micro",
                models.BigIntegerField(default=0, help_text="measured energy x PUE x tariff"),
            ),
            (
                "settlement_micro",
                models.BigIntegerField(default=0, help_text="measured - priced energy"),
            ),
            (
                "total_micro",
                models.BigIntegerField(default=0, help_text="capacity + measured energy"),
            ),
        ]
    ] + [
        migrations.AddField(
            model_name="settlement",
            name="final",
            field=models.BooleanField(default=False, help_text="the lease's last line"),
        ),
        migrations.AddField(
            model_name="settlement",
            name="gpus",
            field=models.JSONField(default=list, help_text="the GPU uuids the line measured"),
        ),
        migrations.AddField(
            model_name="settlement",
            name="ledger_block",
            field=models.BigIntegerField(blank=True, null=True),
        ),
        migrations.AddField(
            model_name="settlement",
            name="validation_code",
            field=models.CharField(blank=True, max_length=40),
        ),
    ]
