from __future__ import annotations

from django.apps import AppConfig
from django.conf import settings


class ObservabilityConfig(AppConfig):
    name = "webapp.observability"
    verbose_name = "Observability"

    def ready(self) -> None:
        from webapp.observability import receivers, tracing

        del receivers  # imported for its signal receivers
        tracing.configure(settings.OTEL_EXPORTER_OTLP_ENDPOINT, settings.OTEL_SERVICE_NAME)
