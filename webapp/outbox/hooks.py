"""Reactions to the ledger, registered by the apps that own them. The outbox knows no
domain app: an app registers, in its AppConfig.ready(), what to do just before a row is
sent (`on_prepare`: resolve references to other ledger records; `on_sign`: add a signature
by the identity that submits the row) and what to do once the ledger decided
(`on_committed`, `on_rejected`, per contract function). The relay calls `prepare`,
`committed` and `rejected` inside the transaction that records the outcome."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from chaincode_client.interface import Receipt
from webapp.outbox.models import OutboxEntry

Prepare = Callable[[dict[str, Any]], dict[str, Any]]
Sign = Callable[[bytes], bytes]  # the submitting identity's signature (ECDSA-SHA256, DER)
Signer = Callable[[dict[str, Any], Sign], dict[str, Any]]
Committed = Callable[[OutboxEntry, Receipt], None]
Rejected = Callable[[OutboxEntry, str], None]

_preparers: list[Prepare] = []
_signers: dict[str, list[Signer]] = defaultdict(list)
_committed: dict[str, list[Committed]] = defaultdict(list)
_rejected: dict[str, list[Rejected]] = defaultdict(list)


class NotReady(Exception):
    """A prerequisite of this row is not on the ledger yet; try it again later."""


def _add(reactions: list, reaction: Callable) -> None:
    if reaction not in reactions:  # ready() may run twice; a reaction runs once
        reactions.append(reaction)


def on_prepare(preparer: Prepare) -> None:
    """`preparer(args) -> args` runs on every row before it is sent; raise NotReady to wait."""
    _add(_preparers, preparer)


def on_sign(function: str, signer: Signer) -> None:
    """`signer(args, sign) -> args` runs on rows of `function` after the preparers, with the
    `sign` of the ledger identity that is about to submit it."""
    _add(_signers[function], signer)


def on_committed(function: str, reaction: Committed) -> None:
    _add(_committed[function], reaction)


def on_rejected(function: str, reaction: Rejected) -> None:
    _add(_rejected[function], reaction)


def reacts_to_rejection(function: str) -> bool:
    """Whether some app acted on the ledger refusing `function` (then a retry would
    contradict what the domain already did)."""
    return bool(_rejected.get(function))


def prepare(entry: OutboxEntry, sign: Sign) -> dict[str, Any]:
    args = dict(entry.args)
    for preparer in _preparers:
        args = preparer(args)
    for signer in _signers[entry.function]:
        args = signer(args, sign)
    return args


def committed(entry: OutboxEntry, receipt: Receipt) -> None:
    for reaction in _committed[entry.function]:
        reaction(entry, receipt)


def rejected(entry: OutboxEntry, message: str) -> None:
    for reaction in _rejected[entry.function]:
        reaction(entry, message)
