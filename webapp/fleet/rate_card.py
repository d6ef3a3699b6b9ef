"""The rate card and catalogue in force, as the contract checks lease terms against them: the
version both organisations last approved on the ledger (governance kind `rate_card`), else
the one deployed with the contract (`ledger/data/`). The web app prices, places and builds
lease terms with this pair, so a rate card the organisations approve applies to the next
lease without a redeploy (before, the app kept quoting the deployed card and the contract
refused every lease under the new one).

Read from the ledger at most every RATE_CARD_REFRESH_S per process; when the ledger cannot
be reached, the last version read stays in force (and the deployed one before any read).
How the approved record is read: webapp.outbox.ledger.approved_policy."""

from __future__ import annotations

import json
import logging
import threading
import time
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from django.conf import settings

from chaincode_client.interface import LedgerError
from ledger.contract.terms import (
    DEPLOYED,
    RATE_CARD_KIND,
    RATE_CARD_PATH,
    RateCard,
    approved_rate_card,
)
from ledger.units import pue_of_milli
from scheduler.catalogue import Catalogue, load_catalogue, parse_catalogue
from webapp.outbox.ledger import approved_policy

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class InForce:
    card: RateCard
    catalogue: Catalogue
    document: dict[str, Any] | None  # the approved policy document; None: the deployed card


_DEPLOYED = InForce(DEPLOYED, load_catalogue(), None)
DEPLOYED_DOCUMENT: dict[str, Any] = json.loads(RATE_CARD_PATH.read_text())
_lock = threading.Lock()
_current = _DEPLOYED
_read_at = float("-inf")


def in_force() -> InForce:
    """The rate card and catalogue new lease terms must follow (see the module's text)."""
    global _current, _read_at
    with _lock:
        if time.monotonic() - _read_at < settings.RATE_CARD_REFRESH_S:
            return _current
        try:
            _current = _read_from_ledger()
        except (LedgerError, ValueError) as exc:
            log.warning("rate card: kept version %s, the ledger's could not be read: %s",
                        _current.card.version, exc)  # fmt: skip
        _read_at = time.monotonic()
        return _current


def site_rates(name: str, card: RateCard | None = None) -> tuple[Decimal, int] | None:
    """(PUE, tariff in micro-units per kWh) of the site `card` (the card in force when None)
    names `name`, or None when it prices no such site."""
    for site in (card or in_force().card).sites.values():
        if site["name"] == name:
            return pue_of_milli(site["pue_milli"]), site["tariff_micro_per_kwh"]
    return None


def currency() -> str:
    """The currency the card in force prices in (its `currency`, ISO 4217): the amounts
    tenants are shown are micro-units of it."""
    document = in_force().document
    card = DEPLOYED_DOCUMENT if document is None else document.get("rate_card", {})
    return str(card.get("currency", ""))


def forget() -> None:
    """Read the ledger again at the next call (a test or a command that just decided one)."""
    global _read_at
    with _lock:
        _read_at = float("-inf")


def _read_from_ledger() -> InForce:
    record = approved_policy(RATE_CARD_KIND)
    if record is None:
        return _DEPLOYED
    document = record["document"]
    if document == _current.document:
        return _current
    card = approved_rate_card(document)  # the contract's own loader and checks
    catalogue = parse_catalogue(json.loads(document["catalogue"], parse_float=Decimal))
    log.info("rate card %s (catalogue %s) approved on the ledger is in force",
             card.version, card.catalogue_version)  # fmt: skip
    return InForce(card, catalogue, document)
