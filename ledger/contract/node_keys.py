"""An AK and an EK each belong to at most one node on the channel, and a revoked AK never
returns (issue 20, hole 1): RegisterNode claims the AK's and (for an EK-bound node) the EK's
name in state; RevokeAK marks the AK revoked for good. Read and written through the shim
stub, so two concurrent registrations of one key conflict on MVCC like two leases of a GPU."""

from __future__ import annotations

from typing import Any

from ledger.contract.state import ContractError, get_json, put_json

AK_INDEX = "ak:"  # ak:{AK name hex} -> {node_id, revoked}
EK_INDEX = "ek:"  # ek:{EK name hex} -> {node_id}


def ak_name(ak_public: bytes) -> str:
    from attest.public import parse_public

    return parse_public(ak_public).name().hex()


async def claim(stub: Any, node_id: str, ak_public: bytes, binding: Any) -> None:
    """Refuse an AK another node holds or any node's revoked one ([enrol.ak_taken],
    [enrol.ak_revoked]), and an EK another node's registration bound ([enrol.ek_taken]);
    then record both as this node's."""
    name = ak_name(ak_public)
    held = await get_json(stub, AK_INDEX + name)
    if held is not None and held["revoked"]:
        raise ContractError(
            f"[enrol.ak_revoked] AK {name[:16]}... of node {held['node_id']} was revoked: a "
            "revoked key never returns, the node registers a new AK"
        )
    if held is not None and held["node_id"] != node_id:
        raise ContractError(
            f"[enrol.ak_taken] AK {name[:16]}... is node {held['node_id']}'s; one AK, one node"
        )
    if binding is not None:
        ek = binding["ek_name"]
        owner = await get_json(stub, EK_INDEX + ek)
        if owner is not None and owner["node_id"] != node_id:
            raise ContractError(
                f"[enrol.ek_taken] the TPM of EK {ek[:16]}... is node {owner['node_id']}'s; "
                "one TPM, one node"
            )
        await put_json(stub, EK_INDEX + ek, {"node_id": node_id})
    await put_json(stub, AK_INDEX + name, {"node_id": node_id, "revoked": False})


async def revoke(stub: Any, node_id: str, ak_public: bytes) -> None:
    await put_json(stub, AK_INDEX + ak_name(ak_public), {"node_id": node_id, "revoked": True})
