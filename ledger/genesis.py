"""The genesis block carries the channel configuration: organisations' CA certificates and
the endorsement policy. Validation (live and in the audit) trusts exactly this."""

from __future__ import annotations

import json
from typing import Any, Protocol

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
