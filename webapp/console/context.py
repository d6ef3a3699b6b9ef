"""What every console and operator page shows the same way: the currency amounts are in
(the rate card's), for the `money` filter of webapp.core.templatetags.units."""

from __future__ import annotations

from django.http import HttpRequest

from webapp.fleet import rate_card


def units(request: HttpRequest) -> dict[str, str]:
    return {"currency": rate_card.currency()}
