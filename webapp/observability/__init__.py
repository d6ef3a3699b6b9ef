"""Observability: Prometheus metrics at /metrics, OpenTelemetry traces over OTLP, JSON logs
(docs/operations.md, "Observability"). `binaries` builds Prometheus, promtool and Jaeger."""
