"""Reading /metrics the way Prometheus does: prometheus-client's own text parser."""

from __future__ import annotations

from prometheus_client.parser import text_string_to_metric_families

Series = dict[tuple[str, tuple[tuple[str, str], ...]], float]


def parse(text: str) -> Series:
    """Every sample of an exposition, keyed by (sample name, sorted labels)."""
    return {
        (sample.name, tuple(sorted(sample.labels.items()))): sample.value
        for family in text_string_to_metric_families(text)
        for sample in family.samples
    }


def value(series: Series, name: str, **labels: str) -> float:
    """One sample's value; 0 when the series does not exist (yet)."""
    return series.get((name, tuple(sorted(labels.items()))), 0.0)


def scrape(client) -> Series:  # type: ignore[no-untyped-def]
    response = client.get("/metrics")
    assert response.status_code == 200, response.status_code
    return parse(response.content.decode())
