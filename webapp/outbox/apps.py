from django.apps import AppConfig


class OutboxConfig(AppConfig):
    name = "webapp.outbox"
    label = "outbox"
    verbose_name = "Ledger outbox"
