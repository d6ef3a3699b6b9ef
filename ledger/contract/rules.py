"""The contract's shared business rules: lookups that fail with a named reason, ownership,
attestation freshness and GPU claims. Module functions over the shim stub, so the contract
class exposes only its transaction functions."""

from __future__ import annotations

from typing import Any

from fabric_chaincode_python.fabric_contract_api import TransactionContext

from ledger.contract import args as args
from ledger.contract import governance
from ledger.contract.state import (
    ATTESTATION,
    GPU,
    GPU_LEASE,
    LEASE,
    NODE,
    NODE_LEASE,
    NS_PER_S,
    ContractError,
    creator_msp,
    get_json,
    put_json,
)

ACTIVE, ENDED = "ACTIVE", "ENDED"


def require_org(ctx: TransactionContext, org: str, what: str) -> None:
    caller = creator_msp(ctx)
    if caller != org:
        raise ContractError(
            f"[org.not_owner] {what} belongs to {org}; the caller is {caller or '(none)'}"
        )


async def load_node(stub: Any, node_id: str) -> dict[str, Any]:
    """The node, its `pcr_policy` the one in force: for a node under a governed policy, the
    version both organisations approved last (a change applies to every later check)."""
    node = await get_json(stub, NODE + node_id)
    if node is None:
        raise ContractError(f"[node.unknown] node {node_id} is not registered")
    if node.get("pcr_policy_id"):
        node["pcr_policy"] = await governed_pcr_policy(stub, node["pcr_policy_id"])
    return dict(node)


async def governed_pcr_policy(stub: Any, policy_id: str) -> dict[str, Any]:
    policy = await governance.approved_policy(stub, "pcr_policy", policy_id)
    if policy is None:
        raise ContractError(
            f"[governance.no_policy] pcr_policy_id {policy_id}: no PCR policy both "
            "organisations approved (ProposePolicy, then ApprovePolicy by the other org)"
        )
    return policy


async def registration_policy(stub: Any, req: dict[str, Any]) -> tuple[str, dict[str, Any]]:
    """(policy id, policy) of a RegisterNode request: the PCR policy both organisations
    approved, named by pcr_policy_id. Golden values one organisation declares alone (an
    inline pcr_policy) are refused: the registering organisation would set its own bar."""
    if "pcr_policy" in req:
        raise ContractError(
            "[enrol.inline_policy] pcr_policy: a node registers under a PCR policy both "
            "organisations approved (pcr_policy_id; ProposePolicy kind pcr_policy, then "
            "ApprovePolicy by the other organisation), not golden values its own "
            "organisation declares"
        )
    policy_id = args.identifier(req, "pcr_policy_id")
    return policy_id, await governed_pcr_policy(stub, policy_id)


async def load_lease(stub: Any, lease_id: str) -> dict[str, Any]:
    lease = await get_json(stub, LEASE + lease_id)
    if lease is None:
        raise ContractError(f"[lease.unknown] lease {lease_id} does not exist")
    return lease


async def active_lease(ctx: TransactionContext, lease_id: str) -> dict[str, Any]:
    lease = await load_lease(ctx.get_stub(), lease_id)
    require_org(ctx, lease["org"], f"lease {lease_id}")
    if lease["status"] != ACTIVE:
        raise ContractError(
            f"[lease.not_active] lease {lease_id} is {lease['status']}, not {ACTIVE}"
        )
    return lease


async def claimable(
    stub: Any, gpu_ids: list[str], att_ids: list[str], now_ns: int, start_ms: int
) -> list[dict[str, str]]:
    """The GPUs, if each is registered, free from `start_ms` on, and its node has a good,
    fresh attestation among att_ids; reading gpulease:{uuid} puts it in the read set, so of
    two concurrent leases of one GPU the second fails MVCC validation."""
    atts = {}
    for att_id in att_ids:
        record = await get_json(stub, ATTESTATION + att_id)
        if record is None:
            raise ContractError(f"[lease.attestation] attestation {att_id} does not exist")
        atts[att_id] = record
    gpus, nodes = [], {}
    for uuid in gpu_ids:
        gpu = await get_json(stub, GPU + uuid)
        if gpu is None:
            raise ContractError(f"[gpu.unregistered] GPU {uuid} is not registered")
        check_free(uuid, await get_json(stub, GPU_LEASE + uuid), start_ms)
        node_id = gpu["node_id"]
        if node_id not in nodes:
            nodes[node_id] = await load_node(stub, node_id)
            require_attested(nodes[node_id], atts.values(), now_ns)
        gpus.append({"uuid": uuid, "generation": gpu["generation"], "node_id": node_id})
    return gpus


def check_free(uuid: str, holder: dict[str, Any] | None, start_ms: int) -> None:
    """GPU time is sold once: a GPU in a lease is not claimable, and a released one only from
    the moment its last lease let it go (time that lease held and may bill), however far
    back the relay's outage tolerance (terms.MAX_BACKDATE_MS) would reach."""
    if holder is None:
        return  # never leased: no lease held any of its time
    if "lease_id" in holder:
        raise ContractError(f"[gpu.leased] GPU {uuid} is in active lease {holder['lease_id']}")
    if start_ms < holder["released_ms"]:
        raise ContractError(
            f"[gpu.time_held] GPU {uuid} was held by lease {holder['last_lease']} until "
            f"{holder['released_ms']}; a claim from {start_ms} would sell that time again"
        )


def require_attested(node: dict[str, Any], atts: Any, now_ns: int) -> None:
    if node["revoked"]:
        raise ContractError(f"[node.revoked] the AK of node {node['node_id']} is revoked")
    max_age_ns = node["pcr_policy"]["max_age_s"] * NS_PER_S
    reasons = []
    for att in atts:
        if att["node_id"] != node["node_id"]:
            continue
        age_ns = now_ns - att["timestamp_ns"]
        if not att["valid"]:
            reasons.append(f"{att['attestation_id']} failed verification")
        elif att["ak_epoch"] != node["ak_epoch"]:
            reasons.append(f"{att['attestation_id']} was made with a revoked AK")
        elif not 0 <= age_ns <= max_age_ns:
            reasons.append(
                f"{att['attestation_id']} is {age_ns // NS_PER_S} s old, "
                f"policy allows {node['pcr_policy']['max_age_s']} s"
            )
        else:
            return
    raise ContractError(
        f"[lease.attestation] node {node['node_id']} has no good attestation within its "
        "policy's age" + (f": {'; '.join(reasons)}" if reasons else " among attestation_ids")
    )


async def claim(stub: Any, lease_id: str, gpus: list[dict[str, str]]) -> None:
    for gpu in gpus:
        await put_json(stub, GPU_LEASE + gpu["uuid"], {"lease_id": lease_id})
    for node_id in sorted({g["node_id"] for g in gpus}):
        await stub.put_state(stub.create_composite_key(NODE_LEASE, [node_id, lease_id]), b"\x00")


async def release(stub: Any, lease_id: str, gpus: list[dict[str, str]], released_ms: int) -> None:
    """The lease lets its GPUs go at `released_ms`: their time before it stays the lease's."""
    for gpu in gpus:
        record = {"released_ms": released_ms, "last_lease": lease_id}
        await put_json(stub, GPU_LEASE + gpu["uuid"], record)
