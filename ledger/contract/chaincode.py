"""The Wattlease contract: nodes, attestations, leases and settlements.

Written once against fabric-chaincode-python's contract API and the shim stub only, so it runs
unchanged on the embedded engine and as chaincode-as-a-service on a Fabric peer. Every
function takes one JSON-object string and returns canonical JSON. Deterministic: the only
clock is the proposal timestamp (each endorser refuses one far from its own clock), there is
no randomness (challenge nonces are derived from the transaction id) and money is integers.
"""

from __future__ import annotations

from typing import Any

from fabric_chaincode_python.fabric_contract_api import (
    Contract,
    ContractChaincode,
    TransactionContext,
)

from ledger.contract import args as args
from ledger.contract import attested_telemetry, billing, ek_binding, node_keys
from ledger.contract import quote as attestation
from ledger.contract import rules as rules
from ledger.contract import terms as lease_terms
from ledger.contract.attestation_tx import AttestationFunctions
from ledger.contract.governance import POLICY, PROPOSAL
from ledger.contract.governance_tx import GOVERNANCE_QUERIES, GovernanceFunctions
from ledger.contract.state import (
    ATTESTATION,
    ATTESTED_TELEMETRY,
    CHALLENGE,
    CLOCK,
    GPU,
    GPU_LEASE,
    LEASE,
    NODE,
    NODE_LEASE,
    NONCE,
    SEQ_DIGITS,
    SETTLEMENT,
    TENANT_LEASE,
    ContractError,
    creator_msp,
    dumps,
    get_json,
    history,
    index_ids,
    put_json,
    range_values,
    tx_time_ns,
)
from ledger.contract.state import (
    json_out as _out,
)
from ledger.units import NS_PER_MS

CONTRACT_NAME = "wattlease"
ACTIVE, ENDED = rules.ACTIVE, rules.ENDED
HISTORY_KEY_PREFIXES = (
    *(NODE, GPU, GPU_LEASE, CLOCK, ATTESTATION, NONCE, CHALLENGE, LEASE),
    ATTESTED_TELEMETRY,  # which quote attested a batch a bill line cites (receipts)
    *(POLICY, PROPOSAL),  # who proposed and approved each version of a policy
)
QUERIES = [
    "GetNode",
    "GetLease",
    "GetAttestation",
    "LeasesByTenant",
    "LeasesByNode",
    "GetSettlements",
    "GetHistory",
    *GOVERNANCE_QUERIES,
]


def _same(record: dict[str, Any], asked: dict[str, Any]) -> bool:
    """A resubmission of what is already recorded (every asked field equal): functions
    answer it with the stored record and write nothing, so a retry never double-books."""
    return all(record.get(key) == value for key, value in asked.items())


class WattleaseContract(AttestationFunctions, GovernanceFunctions, Contract):
    Name = CONTRACT_NAME

    def get_evaluate_transactions(self) -> list[str]:
        return list(QUERIES)

    # -- nodes ---------------------------------------------------------------------------

    async def RegisterNode(self, ctx: TransactionContext, request: str) -> str:
        """{node_id, org, ak_public (b64 TPM2B_PUBLIC), gpus: [{uuid, generation}],
        pcr_policy_id (a PCR policy both organisations approved; an inline pcr_policy is
        refused), ek_binding and enrolment_quote (required once the channel approved EK
        roots; see ledger.contract.ek_binding)}"""
        req = args.load_object(request)
        node_id, org = args.identifier(req, "node_id"), args.identifier(req, "org")
        ak_public = args.b64bytes(req, "ak_public")
        gpus = args.gpu_inventory(req)
        rules.require_org(ctx, org, f"node {node_id}")
        stub = ctx.get_stub()
        policy_id, policy = await rules.registration_policy(stub, req)
        attestation.check_registration(ak_public, policy)
        binding = await ek_binding.check(
            ctx, req, node_id, ak_public, tx_time_ns(stub), gpus, policy
        )
        node = await get_json(stub, NODE + node_id)
        epoch = 0
        if node is not None:
            if not node["revoked"]:
                asked = {
                    "org": org,
                    "ak_public": req["ak_public"],
                    "gpus": gpus,
                    "ek_binding": binding,
                    "pcr_policy_id": policy_id,
                }
                if _same(node, asked):
                    return _out(node)  # a retried submission: same answer, nothing written
                raise ContractError(
                    f"[enrol.registered] node {node_id} is already registered; revoke its AK first"
                )
            if sorted(g["uuid"] for g in node["gpus"]) != sorted(g["uuid"] for g in gpus):
                raise ContractError(
                    f"[enrol.gpus_changed] node {node_id} must be re-registered with the same GPUs"
                )
            epoch = node["ak_epoch"] + 1
        await node_keys.claim(stub, node_id, ak_public, binding)
        for gpu in gpus:
            owner = await get_json(stub, GPU + gpu["uuid"])
            if owner is not None and owner["node_id"] != node_id:
                raise ContractError(
                    f"[enrol.gpu_taken] GPU {gpu['uuid']} is registered to node {owner['node_id']}"
                )
            await put_json(stub, GPU + gpu["uuid"], {"node_id": node_id, **gpu})
        record = {
            "node_id": node_id,
            "org": org,
            "ak_public": req["ak_public"],
            "ak_epoch": epoch,
            "gpus": gpus,
            "pcr_policy": policy,
            "pcr_policy_id": policy_id,
            "ek_binding": binding,  # None: registered before the channel approved EK roots
            "revoked": False,
            "registered_tx": stub.get_txid(),
            "registered_ns": tx_time_ns(stub),
        }
        await put_json(stub, NODE + node_id, record)
        await stub.delete_state(CLOCK + node_id)  # a new AK starts a new clock baseline
        stub.set_event("NodeRegistered", dumps({"node_id": node_id, "ak_epoch": epoch}))
        return _out(record)

    async def RevokeAK(self, ctx: TransactionContext, request: str) -> str:
        """{node_id, reason}"""
        req = args.load_object(request)
        node_id = args.identifier(req, "node_id")
        reason = req.get("reason", "")
        if not isinstance(reason, str) or len(reason) > args.MAX_TEXT_LEN:
            raise args.ArgumentError(f"reason: must be a string of <= {args.MAX_TEXT_LEN} chars")
        stub = ctx.get_stub()
        node = await rules.load_node(stub, node_id)
        rules.require_org(ctx, node["org"], f"node {node_id}")
        if node["revoked"]:
            return _out(node)  # revoking twice is a retry: same answer, nothing written
        await node_keys.revoke(stub, node_id, args.b64bytes(node, "ak_public"))
        node.update(revoked=True, revoked_tx=stub.get_txid(), revoked_reason=reason)
        await put_json(stub, NODE + node_id, node)
        stub.set_event("AKRevoked", dumps({"node_id": node_id, "ak_epoch": node["ak_epoch"]}))
        return _out(node)

    # -- leases --------------------------------------------------------------------------

    async def CreateLease(self, ctx: TransactionContext, request: str) -> str:
        """{lease_id, tenant, gpus: [uuid], terms: {generation, precision, site, priority,
        start_ms, planned_ms, pue_milli, tariff_micro_per_kwh, capacity_micro_per_gpu_hour,
        attributed_power_mw: {uuid: mW}}, attestation_ids}; terms checked against the
        rate card and catalogue (ledger.contract.terms)."""
        req = args.load_object(request)
        lease_id, tenant = args.identifier(req, "lease_id"), args.identifier(req, "tenant")
        gpu_ids, asked_terms = args.id_list(req, "gpus"), lease_terms.parse_terms(req)
        att_ids = args.id_list(req, "attestation_ids")
        stub = ctx.get_stub()
        existing = await get_json(stub, LEASE + lease_id)
        if existing is not None:
            asked = {"tenant": tenant, "org": creator_msp(ctx), "attestation_ids": att_ids}
            if (
                _same(existing, asked)
                and not existing["migrations"]
                and _same(existing["terms"], asked_terms)
                and sorted(g["uuid"] for g in existing["gpus"]) == sorted(gpu_ids)
            ):
                return _out(existing)  # a retried submission: same answer, nothing written
            raise ContractError(f"[lease.exists] lease {lease_id} already exists with other terms")
        now = tx_time_ns(stub)
        gpus = await rules.claimable(stub, gpu_ids, att_ids, now, asked_terms["start_ms"])
        card = await lease_terms.rate_card(stub)
        terms = lease_terms.check_terms(asked_terms, gpus, card, now // NS_PER_MS)
        lease = {
            "lease_id": lease_id,
            "tenant": tenant,
            "org": creator_msp(ctx),
            "gpus": gpus,
            "terms": terms,
            "billing": {"next_seq": 0, "billed_until_ms": terms["start_ms"], "final": False},
            "attestation_ids": att_ids,
            "status": ACTIVE,
            "created_tx": stub.get_txid(),
            "created_ns": now,
            "migrations": [],
        }
        await rules.claim(stub, lease_id, gpus)
        await put_json(stub, LEASE + lease_id, lease)
        await stub.put_state(stub.create_composite_key(TENANT_LEASE, [tenant, lease_id]), b"\x00")
        stub.set_event("LeaseCreated", dumps({"lease_id": lease_id, "tenant": tenant}))
        return _out(lease)

    async def EndLease(self, ctx: TransactionContext, request: str) -> str:
        """{lease_id, end_ms (optional; default the ledger's clock)}: the lease ends and lets
        its GPUs go at end_ms, when the web app ended it (its final line ends there). Not
        before what is billed or the lease's start, not after the endorsers' clock."""
        req = args.load_object(request)
        stub = ctx.get_stub()
        lease_id = args.identifier(req, "lease_id")
        ended = await rules.load_lease(stub, lease_id)
        if ended["status"] == ENDED:
            rules.require_org(ctx, ended["org"], f"lease {lease_id}")
            return _out(ended)  # ending twice is a retry: same answer, nothing written
        lease = await rules.active_lease(ctx, lease_id)
        now = tx_time_ns(stub)
        end_ms = billing.end_of(lease, req, now)
        await rules.release(stub, lease_id, lease["gpus"], end_ms)
        lease.update(status=ENDED, ended_tx=stub.get_txid(), ended_ns=now, ended_ms=end_ms)
        await put_json(stub, LEASE + lease["lease_id"], lease)
        stub.set_event("LeaseEnded", dumps({"lease_id": lease["lease_id"]}))
        return _out(lease)

    async def MigrateLease(self, ctx: TransactionContext, request: str) -> str:
        """{lease_id, gpus: [uuid], attestation_ids, terms}: move to GPUs of another
        generation; the terms (as CreateLease's) price the rest from terms.start_ms on."""
        req = args.load_object(request)
        gpu_ids, att_ids = args.id_list(req, "gpus"), args.id_list(req, "attestation_ids")
        asked_terms = lease_terms.parse_terms(req)
        stub = ctx.get_stub()
        lease = await rules.active_lease(ctx, args.identifier(req, "lease_id"))
        if "terms" not in lease:
            raise ContractError(f"[terms.start] lease {lease['lease_id']} has no terms to move")
        if (
            sorted(g["uuid"] for g in lease["gpus"]) == sorted(gpu_ids)
            and lease["migrations"]
            and _same(lease["terms"], asked_terms)
        ):
            return _out(lease)  # already moved there: a retried submission, nothing written
        now = tx_time_ns(stub)
        gpus = await rules.claimable(stub, gpu_ids, att_ids, now, asked_terms["start_ms"])
        old_generations = {g["generation"] for g in lease["gpus"]}
        same = [g["uuid"] for g in gpus if g["generation"] in old_generations]
        if same:
            raise ContractError(
                f"[migrate.same_generation] migration must move to another generation; {same} are "
                f"{sorted(old_generations)} like the lease's current GPUs"
            )
        card = await lease_terms.rate_card(stub)
        terms = lease_terms.check_terms(asked_terms, gpus, card, now // NS_PER_MS)
        floor = max(lease["billing"]["billed_until_ms"], lease["terms"]["start_ms"])
        if terms["start_ms"] < floor:
            raise ContractError(
                f"[terms.start] the move at {terms['start_ms']} precedes what is already "
                f"billed or priced (until {floor})"
            )
        await rules.release(stub, lease["lease_id"], lease["gpus"], terms["start_ms"])
        await rules.claim(stub, lease["lease_id"], gpus)
        lease["migrations"].append(
            {
                "from": lease["gpus"],
                "to": gpus,
                "terms": lease["terms"],
                "until_ms": terms["start_ms"],
                "tx_id": stub.get_txid(),
                "timestamp_ns": now,
            }
        )
        lease.update(gpus=gpus, attestation_ids=att_ids, terms=terms)
        await put_json(stub, LEASE + lease["lease_id"], lease)
        stub.set_event("LeaseMigrated", dumps({"lease_id": lease["lease_id"]}))
        return _out(lease)

    async def Settle(self, ctx: TransactionContext, request: str) -> str:
        """{lease_id, interval_seq, start_ms, end_ms, measured_mj (must equal what the cited
        batches' attested counters show: contract.attested_telemetry.measured_mj),
        telemetry_digest (hex sha256), telemetry_batches: [{gpu, digest, rows}], final,
        tariff_micro_per_kwh, pue_milli, capacity_micro_per_gpu_hour, capacity_micro,
        priced_energy_micro, measured_energy_micro, settlement_micro, total_micro}: one bill
        line, recomputed from the lease's terms on the ledger
        (ledger.contract.billing). Idempotent by (lease_id, interval_seq)."""
        req = billing.parse_request(args.load_object(request))
        stub = ctx.get_stub()
        lease = await rules.load_lease(stub, req["lease_id"])
        rules.require_org(ctx, lease["org"], f"lease {req['lease_id']}")
        key = stub.create_composite_key(
            SETTLEMENT, [req["lease_id"], str(req["interval_seq"]).zfill(SEQ_DIGITS)]
        )
        existing = await get_json(stub, key)
        if existing is not None:
            differs = sorted(f for f in req if existing.get(f) != req[f])
            if differs:
                raise ContractError(
                    f"[settle.duplicate] settlement {req['lease_id']}#{req['interval_seq']} "
                    f"already recorded with different {', '.join(differs)}"
                )
            return _out(existing)  # a retry: same answer, nothing written
        billing.check_sequence(lease, req, tx_time_ns(stub))
        terms = billing.terms_for(lease, req["start_ms"], req["end_ms"])
        derived_mj = await attested_telemetry.measured_mj(stub, terms, req)
        attested_telemetry.check_measured(req, derived_mj)
        card = await lease_terms.rate_card(stub)
        board_w = card.generations[terms["generation"]].board_power_w
        billing.check_measurement(terms, board_w, req)
        line = billing.line_of(terms, req)
        record = {
            **req,
            **line.as_dict(),
            "generation": terms["generation"],
            "tx_id": stub.get_txid(),
            "timestamp_ns": tx_time_ns(stub),
        }
        await put_json(stub, key, record)
        billing.advance(lease, req)
        await put_json(stub, LEASE + lease["lease_id"], lease)
        stub.set_event("Settled", dumps({k: req[k] for k in ("lease_id", "interval_seq")}))
        return _out(record)

    # -- queries -------------------------------------------------------------------------

    async def GetNode(self, ctx: TransactionContext, request: str) -> str:
        """{node_id}"""
        node_id = args.identifier(args.load_object(request), "node_id")
        return _out(await rules.load_node(ctx.get_stub(), node_id))

    async def GetLease(self, ctx: TransactionContext, request: str) -> str:
        """{lease_id}"""
        lease_id = args.identifier(args.load_object(request), "lease_id")
        return _out(await rules.load_lease(ctx.get_stub(), lease_id))

    async def GetAttestation(self, ctx: TransactionContext, request: str) -> str:
        """{attestation_id}"""
        att_id = args.identifier(args.load_object(request), "attestation_id")
        record = await get_json(ctx.get_stub(), ATTESTATION + att_id)
        if record is None:
            raise ContractError(f"[attest.unknown] attestation {att_id} does not exist")
        return _out(record)

    async def LeasesByTenant(self, ctx: TransactionContext, request: str) -> str:
        """{tenant} -> [lease]"""
        tenant = args.identifier(args.load_object(request), "tenant")
        stub = ctx.get_stub()
        ids = await index_ids(stub, TENANT_LEASE, tenant)
        return _out([await rules.load_lease(stub, lease_id) for lease_id in ids])

    async def LeasesByNode(self, ctx: TransactionContext, request: str) -> str:
        """{node_id} -> [lease] (every lease that ever used one of the node's GPUs)"""
        node_id = args.identifier(args.load_object(request), "node_id")
        stub = ctx.get_stub()
        ids = await index_ids(stub, NODE_LEASE, node_id)
        return _out([await rules.load_lease(stub, lease_id) for lease_id in ids])

    async def GetSettlements(self, ctx: TransactionContext, request: str) -> str:
        """{lease_id} -> [settlement] in interval order"""
        lease_id = args.identifier(args.load_object(request), "lease_id")
        stub = ctx.get_stub()
        iterator = await stub.get_state_by_partial_composite_key(SETTLEMENT, [lease_id])
        return _out(await range_values(iterator))

    async def GetHistory(self, ctx: TransactionContext, request: str) -> str:
        """{key} -> [{tx_id, timestamp_ns, is_delete, value}] for a plain key (node:..., ...),
        newest first (block height, then position in the block), on both backends."""
        req = args.load_object(request)
        key = req.get("key")
        if not isinstance(key, str) or not key.startswith(HISTORY_KEY_PREFIXES):
            raise args.ArgumentError(f"key: must start with one of {HISTORY_KEY_PREFIXES}")
        args.identifier({"key": key.split(":", 1)[1]}, "key")
        return _out(await history(ctx.get_stub(), key))


def new_chaincode() -> ContractChaincode:
    """The chaincode as a Fabric peer (or the embedded engine) dispatches to it."""
    return ContractChaincode.new_chaincode(WattleaseContract())
