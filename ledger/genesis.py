"""The genesis block carries the channel configuration: organisations' CA certificates and
the endorsement policy. Validation (live and in the audit) trusts exactly this, and an auditor
checks it against the organisation CAs it trusts from outside (`load_roots`, `check_roots`)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Protocol

from cryptography import x509
from cryptography.hazmat.primitives import serialization

from ledger.audit.fabric_trust import RootsError, parse_roots

GENESIS_PREVIOUS_HASH = "0" * 64


class _Chain(Protocol):
    def block_txs(self, number: int) -> list[tuple[int, str, str, bytes]]: ...


def read_config(store: _Chain) -> dict[str, Any]:
    txs = store.block_txs(0)
    if len(txs) != 1:
        raise ValueError(f"genesis block has {len(txs)} transactions, expected 1")
    try:
        config = json.loads(txs[0][3])["config"]
        if not isinstance(config["ca_certs"], dict) or not isinstance(config["channel"], str):
            raise ValueError("ca_certs/channel malformed")
        _ = config["policy"]["orgs"], config["policy"]["threshold"]
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"genesis block config is malformed: {exc}") from None
    return config


def load_roots(path: Path) -> dict[str, bytes]:
    """The channel's organisation CA certificates an auditor trusts, obtained from each
    organisation (never from the receipt being checked): `<MSPID>.pem` files in a folder, or
    a roots file (`org MSPID` lines, each followed by its CA's PEM: ledger.audit.fabric_trust)."""
    directory = Path(path)
    if directory.is_file():
        try:
            # the embedded ledger has no ordering organisation: its blocks are not signed
            bundle = parse_roots(directory.read_bytes(), need_orderer=False)
        except RootsError as exc:
            raise ValueError(str(exc)) from None
        several = sorted(msp for msp, certs in bundle.orgs.items() if len(certs) != 1)
        if several:
            raise ValueError(f"{directory}: name one CA for each of {several}")
        return {
            msp: certs[0].public_bytes(serialization.Encoding.PEM)
            for msp, certs in bundle.orgs.items()
        }
    roots = {pem.stem: pem.read_bytes() for pem in sorted(directory.glob("*.pem"))}
    if not roots:
        raise ValueError(f"{directory} holds no <MSPID>.pem CA certificates")
    for mspid, pem in roots.items():
        try:
            _der(pem)
        except ValueError as exc:
            raise ValueError(f"{directory}/{mspid}.pem is not a PEM certificate: {exc}") from None
    return roots


def check_roots(config: dict[str, Any], roots: dict[str, bytes]) -> list[str]:
    """Defects where the channel config does not name exactly the trusted organisation CAs."""
    named = {mspid: _der(pem.encode()) for mspid, pem in config["ca_certs"].items()}
    trusted = {mspid: _der(pem) for mspid, pem in roots.items()}
    defects = [
        f"channel config: the CA of {mspid} is not the one you trust"
        if mspid in trusted
        else f"channel config: {mspid} is not an organisation you trust"
        for mspid, der in sorted(named.items())
        if trusted.get(mspid) != der
    ]
    defects += [
        f"channel config: {mspid}, an organisation you trust, is not in it"
        for mspid in sorted(set(trusted) - set(named))
    ]
    return defects


def _der(pem: bytes) -> bytes:
    return x509.load_pem_x509_certificate(pem).public_bytes(serialization.Encoding.DER)
