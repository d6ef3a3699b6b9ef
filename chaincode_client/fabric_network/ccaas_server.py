"""Serve a contract as chaincode-as-a-service, through the shim adapter.

    CHAINCODE_ID=wattlease_1.0:<sha256> CHAINCODE_SERVER_ADDRESS=127.0.0.1:9999 \
        python -m chaincode_client.fabric_network.ccaas_server \
            [ledger.contract.chaincode:new_chaincode]

CHAINCODE_ID is the package id the peer reports after `peer lifecycle chaincode install`; the
peer dials CHAINCODE_SERVER_ADDRESS (the address in the package's connection.json). TLS is on
when CHAINCODE_TLS_KEY and CHAINCODE_TLS_CERT name PEM files; CHAINCODE_TLS_CLIENT_CA also
requires the peer to present a client certificate signed by that CA.
"""

from __future__ import annotations

import asyncio
import contextlib
import importlib
import logging
import os
import sys
from collections.abc import Mapping
from pathlib import Path

from fabric_chaincode_python.fabric_shim.interfaces import Chaincode

from chaincode_client.fabric_network.shim_adapter import serve

DEFAULT_FACTORY = "ledger.contract.chaincode:new_chaincode"
PER_MESSAGE_WARNING = "-->> Look out!"  # fabric_shim/handler.py, Handler.handle_message


def drop_per_message_warning(record: logging.LogRecord) -> bool:
    return record.msg != PER_MESSAGE_WARNING


class ServerConfigError(ValueError):
    pass


def load_factory(spec: str) -> Chaincode:
    module_name, sep, attr = spec.partition(":")
    if not sep or not module_name or not attr:
        raise ServerConfigError(f"contract factory {spec!r}: expected module:function")
    factory = getattr(importlib.import_module(module_name), attr, None)
    if not callable(factory):
        raise ServerConfigError(f"{spec}: {attr} is not a function of {module_name}")
    chaincode = factory()
    if not isinstance(chaincode, Chaincode):
        raise ServerConfigError(f"{spec} returned {type(chaincode).__name__}, not a Chaincode")
    return chaincode


def _pem(env: Mapping[str, str], name: str) -> bytes | None:
    value = env.get(name, "").strip()
    if not value:
        return None
    path = Path(value)
    if not path.is_file():
        raise ServerConfigError(f"{name}={value!r}: no such file")
    return path.read_bytes()


def main(argv: list[str] | None = None, env: Mapping[str, str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    env = os.environ if env is None else env
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    # fabric-chaincode-python logs every peer message, proposal bytes included, at INFO on the
    # "asyncio" logger: at a few hundred transactions a second that costs more than the
    # contract. Its warnings and errors still show, but for one: a leftover line it writes
    # at WARNING for every peer message (~6 per RegisterNode; with its queue thread, about a
    # quarter of this server's CPU in a profile at 256 transactions in flight).
    shim_log = logging.getLogger("asyncio")
    shim_log.setLevel(logging.WARNING)
    shim_log.addFilter(drop_per_message_warning)
    try:
        ccid = env.get("CHAINCODE_ID", "").strip()
        address = env.get("CHAINCODE_SERVER_ADDRESS", "").strip()
        if not ccid or not address:
            raise ServerConfigError("CHAINCODE_ID and CHAINCODE_SERVER_ADDRESS must be set")
        key, cert = _pem(env, "CHAINCODE_TLS_KEY"), _pem(env, "CHAINCODE_TLS_CERT")
        if bool(key) != bool(cert):
            raise ServerConfigError("CHAINCODE_TLS_KEY and CHAINCODE_TLS_CERT go together")
        chaincode = load_factory(argv[0] if argv else DEFAULT_FACTORY)
        tls = {"tls_key": key, "tls_cert": cert, "client_ca": _pem(env, "CHAINCODE_TLS_CLIENT_CA")}
    except ServerConfigError as exc:
        print(f"ccaas_server: {exc}", file=sys.stderr)
        return 2
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C / SIGINT is a normal stop
        asyncio.run(serve(chaincode, ccid, address, **tls))
    return 0


if __name__ == "__main__":
    sys.exit(main())
