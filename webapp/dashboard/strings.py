"""What the operator pages' scripts write themselves, in the page's language: chart titles,
the live badge, and the words for states and advice (the one table of
webapp.core.templatetags.units), handed to dashboard.js and ops.js as JSON."""

from __future__ import annotations

from django.utils.translation import get_language, gettext_noop
from django.utils.translation import gettext as _

from webapp.core.templatetags.units import WORDS

TEXTS = [
    gettext_noop("Utilisation, last 10 min"),
    gettext_noop("Leases by state"),
    gettext_noop("Cost by tenant (currency units)"),
    gettext_noop("Idle capacity by hour (share of GPU samples idle)"),
    gettext_noop("Utilisation per generation: compute and memory bandwidth"),
    gettext_noop("Compute utilisation per GPU"),
    gettext_noop("Memory-bandwidth utilisation per GPU"),
    gettext_noop("Compute per generation, newest samples"),
    gettext_noop("Billed by tenant: sum of bill line totals, with the quotes (currency units)"),
    gettext_noop("Billed by generation: sum of bill line totals (currency units)"),
    gettext_noop("Settled energy: attributed against measured (kWh)"),
    gettext_noop("Committed per second"),
    gettext_noop("Outbox-to-commit latency (ms)"),
    gettext_noop("Outbox depth (written, not yet committed)"),
    gettext_noop("Validation codes"),
    gettext_noop("Idle capacity by hour of day and weekday (last 4 weeks)"),
    gettext_noop("Attestation timeline"),
    gettext_noop("Power per GPU (W)"),
    gettext_noop("Utilisation per site: compute and memory bandwidth"),
    gettext_noop("Utilisation per pool: compute and memory bandwidth"),
    gettext_noop("Compute utilisation per node"),
    gettext_noop("Memory-bandwidth utilisation per node"),
    gettext_noop("Compute and memory-bandwidth utilisation"),
    gettext_noop("Hottest reading (°C)"),
    gettext_noop("live"),
    gettext_noop("connecting…"),
    gettext_noop("reconnecting…"),
    gettext_noop("waiting for the next samples…"),
]


def page_strings(currency: str) -> dict[str, object]:
    return {
        "lang": get_language() or "en",
        "currency": currency,
        "text": {text: _(text) for text in TEXTS},
        "words": {code: str(word) for code, word in WORDS.items()},
    }
