"""State-access helpers shared by the contract's functions: canonical JSON, keys, timestamps.

Only the shim stub API is used (get_state/put_state/delete_state, composite keys, range
queries, history), so the same code runs on the embedded engine and on a Fabric peer.
"""

from __future__ import annotations

import os
import time
from typing import Any

from ledger.canonical import dumps, loads
from ledger.units import NS_PER_S

NODE = "node:"  # node:{node_id} -> node record (AK, GPUs, policy, org, revoked)
GPU = "gpu:"  # gpu:{uuid} -> {node_id, generation}
# gpulease:{uuid} -> {lease_id} while leased; once released {released_ms, last_lease}: the GPU's
# time up to released_ms was held (and may be billed) by that lease, so no other claims it
GPU_LEASE = "gpulease:"
CLOCK = "clock:"  # clock:{node_id} -> the TPM clock of the node's last good quote
ATTESTATION = "att:"  # att:{tx_id} -> attestation record with the verdict
NONCE = "nonce:"  # nonce:{hex} -> attestation id; a nonce is accepted once, ever
CHALLENGE = "challenge:"  # challenge:{nonce hex} -> a challenge the ledger issued to a node
LEASE = "lease:"  # lease:{lease_id} -> lease record
TENANT_LEASE = "tenant~lease"  # composite index (tenant, lease_id)
NODE_LEASE = "node~lease"  # composite index (node_id, lease_id)
SETTLEMENT = "settlement"  # composite (lease_id, seq) -> settlement record
# attested-telemetry:{gpu}:{batch digest} -> {attestation_id, node_id} of the valid quote
ATTESTED_TELEMETRY = "attested-telemetry:"

MAX_CLOCK_SKEW_ENV = "LEDGER_MAX_CLOCK_SKEW_S"
DEFAULT_MAX_CLOCK_SKEW_S = 120  # Fabric clients and peers run NTP; two minutes is generous
SEQ_DIGITS = 12  # zero-padded so range queries return settlements in sequence order


def settlements_prefix(lease_id: str | None = None) -> str:
    """The start of the SETTLEMENT composite keys (of one lease, when given), as the stub's
    create_composite_key lays them out: for readers of state and write sets outside a stub."""
    return "\x00" + SETTLEMENT + "\x00" + ("" if lease_id is None else lease_id + "\x00")


class ContractError(Exception):
    """A business rule refused the transaction; the message says which and why."""


def _max_clock_skew_s(environ: Any) -> int:
    """The endorser's bound on |proposal timestamp - its own clock|, from the environment of
    the chaincode process (each organisation's peer sets its own). Read once, at import: a
    bad value stops the chaincode from starting rather than endorsing with no bound."""
    raw = environ.get(MAX_CLOCK_SKEW_ENV, "")
    if not raw:
        return DEFAULT_MAX_CLOCK_SKEW_S
    try:
        value = int(raw, 10)
    except ValueError:
        value = 0
    if value < 1:
        raise ValueError(f"{MAX_CLOCK_SKEW_ENV}={raw!r}: must be a whole number of seconds >= 1")
    return value


MAX_CLOCK_SKEW_S = _max_clock_skew_s(os.environ)


def json_out(value: Any) -> str:
    """A contract function's return value: canonical JSON text."""
    return dumps(value).decode()


async def get_json(stub: Any, key: str) -> Any | None:
    raw = await stub.get_state(key)
    if not raw:  # Fabric returns empty bytes for a missing key
        return None
    return loads(raw)


async def put_json(stub: Any, key: str, value: Any) -> None:
    await stub.put_state(key, dumps(value))


def tx_time_ns(stub: Any) -> int:
    """The proposal's timestamp, once this endorser has checked it against its own clock.

    The client sets the timestamp, so on its own it proves nothing; each endorser refuses a
    proposal more than MAX_CLOCK_SKEW_S away from `time.time_ns()` in its own process. The
    state written stays deterministic: only the proposal's timestamp is ever recorded."""
    ts = stub.get_tx_timestamp()
    stamped = int(ts.seconds) * NS_PER_S + int(ts.nanos)
    skew_ns = stamped - time.time_ns()
    if abs(skew_ns) > MAX_CLOCK_SKEW_S * NS_PER_S:
        raise ContractError(
            f"[clock.skew] proposal timestamp is {skew_ns / NS_PER_S:+.0f} s from this "
            f"endorser's clock; at most {MAX_CLOCK_SKEW_S} s ({MAX_CLOCK_SKEW_ENV}) is accepted"
        )
    return stamped


def creator_msp(ctx: Any) -> str:
    return ctx.get_client_identity().get_mspid()


async def range_values(iterator: Any) -> list[Any]:
    out = []
    async for kv in iterator:
        out.append(loads(kv.value))
    return out


async def index_ids(stub: Any, object_type: str, attribute: str) -> list[str]:
    """The last attribute of every composite key under (object_type, attribute)."""
    iterator = await stub.get_state_by_partial_composite_key(object_type, [attribute])
    ids = []
    async for kv in iterator:
        _, attributes = stub.split_composite_key(kv.key)
        ids.append(attributes[-1])
    return ids


async def history(stub: Any, key: str) -> list[dict[str, Any]]:
    iterator = await stub.get_history_for_key(key)
    out = []
    async for mod in iterator:
        out.append(
            {
                "tx_id": mod.tx_id,
                "timestamp_ns": int(mod.timestamp.seconds) * NS_PER_S + int(mod.timestamp.nanos),
                "is_delete": bool(mod.is_delete),
                "value": None if mod.is_delete or not mod.value else loads(mod.value),
            }
        )
    return out
