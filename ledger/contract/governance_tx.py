"""The contract's governance functions (ProposePolicy, ApprovePolicy, GetPolicy), mixed into
WattleaseContract. The rules are in `ledger.contract.governance`; these functions read and write."""

from __future__ import annotations

from typing import Any

from fabric_chaincode_python.fabric_contract_api import TransactionContext

from ledger.contract import args as args
from ledger.contract import governance as gov
from ledger.contract.state import ContractError, dumps, get_json, put_json, tx_time_ns
from ledger.contract.state import json_out as _out

GOVERNANCE_QUERIES = ["GetPolicy", "GetProposal"]


class GovernanceFunctions:
    async def ProposePolicy(self, ctx: TransactionContext, request: str) -> str:
        """{kind, key?, document} -> the open proposal (proposal_id = this tx id). By an
        organisation's admin; takes effect once another organisation's admin approves it."""
        req = args.load_object(request)
        proposer = gov.admin_of(ctx)
        kind = gov.kind_of(req)
        key, document = gov.key_of(req), gov.document_of(req, kind)
        gov.check_decision(ctx, kind, document, [proposer["mspid"]])
        stub = ctx.get_stub()
        current = await get_json(stub, gov.policy_key(kind, key))
        proposal = {
            "proposal_id": stub.get_txid(),
            "kind": kind,
            "key": key,
            "document": document,
            "base_version": current["version"] if current else 0,
            "proposed_by": proposer,
            "proposed_ns": tx_time_ns(stub),
            "status": "open",
        }
        await put_json(stub, gov.PROPOSAL + proposal["proposal_id"], proposal)
        stub.set_event("PolicyProposed", dumps({k: proposal[k] for k in ("proposal_id", "kind")}))
        return _out(proposal)

    async def ApprovePolicy(self, ctx: TransactionContext, request: str) -> str:
        """{proposal_id} -> the policy now in force. By an admin of another organisation than
        the proposer's; refused if the policy changed since the proposal was made."""
        proposal_id = args.identifier(args.load_object(request), "proposal_id")
        approver = gov.admin_of(ctx)
        stub = ctx.get_stub()
        proposal = await _load_proposal(stub, proposal_id)
        key = gov.policy_key(proposal["kind"], proposal["key"])
        if proposal["status"] == "approved":
            if proposal["approved_by"] == approver:
                return _out(await get_json(stub, key))  # a retry: same answer, nothing written
            raise ContractError(f"[governance.decided] {proposal_id} is already approved")
        gov.check_approver(proposal, approver)
        orgs = [proposal["proposed_by"]["mspid"], approver["mspid"]]
        gov.check_decision(ctx, proposal["kind"], proposal["document"], orgs)
        current = await get_json(stub, key)
        version = current["version"] if current else 0
        if version != proposal["base_version"]:
            raise ContractError(
                f"[governance.stale_proposal] {proposal_id} changes version "
                f"{proposal['base_version']} of {key}, which is now at version {version}"
            )
        now = tx_time_ns(stub)
        record = {
            "kind": proposal["kind"],
            "key": proposal["key"],
            "document": proposal["document"],
            "version": version + 1,
            "proposal_id": proposal_id,
            "proposed_by": proposal["proposed_by"],
            "approved_by": approver,
            "approved_tx": stub.get_txid(),
            "approved_ns": now,
        }
        await put_json(stub, key, record)
        proposal.update(status="approved", approved_by=approver, approved_tx=stub.get_txid())
        await put_json(stub, gov.PROPOSAL + proposal_id, proposal)
        stub.set_event(
            "PolicyApproved",
            dumps({"kind": record["kind"], "key": record["key"], "version": version + 1}),
        )
        return _out(record)

    async def GetPolicy(self, ctx: TransactionContext, request: str) -> str:
        """{kind, key?} -> the approved policy record (document, version, who decided)."""
        req = args.load_object(request)
        kind, key = gov.kind_of(req), gov.key_of(req)
        record = await get_json(ctx.get_stub(), gov.policy_key(kind, key))
        if record is None:
            raise ContractError(f"[governance.no_policy] no approved {kind} policy {key!r}")
        return _out(record)

    async def GetProposal(self, ctx: TransactionContext, request: str) -> str:
        """{proposal_id} -> the proposal and its status."""
        proposal_id = args.identifier(args.load_object(request), "proposal_id")
        return _out(await _load_proposal(ctx.get_stub(), proposal_id))


async def _load_proposal(stub: Any, proposal_id: str) -> dict[str, Any]:
    proposal = await get_json(stub, gov.PROPOSAL + proposal_id)
    if proposal is None:
        raise ContractError(f"[governance.no_proposal] proposal {proposal_id} does not exist")
    return dict(proposal)
