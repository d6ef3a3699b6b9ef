"""Building contract requests in tests: register nodes, attest them with real quotes."""

from __future__ import annotations

import functools
import json
import time
from pathlib import Path
from typing import Any

from attest import readings
from chaincode_client.governance import decide
from chaincode_client.interface import REASON_RE, EndorsementError, LedgerClient
from ledger import money
from ledger.contract import bill_line as schema
from ledger.contract.state import ContractError
from ledger.contract.terms import DEPLOYED as RATE_CARD
from ledger.engine.core import msp_dir_for
from ledger.engine.msp import org_ca_certs

DEFAULT_MAX_AGE_S = 600
BOOT_POLICY = "boot"  # the PCR policy id most tests register under (conftest boot_policy)
# engine tests that register nodes only as something to write: a policy they approve first
ZERO_POLICY_ID, ZERO_PCR_POLICY = "zero", {"pcrs": {"sha256": {"0": "00" * 32}}, "max_age_s": 60}
H100, A100 = "H100-SXM5-80GB", "A100-SXM4-80GB"  # catalogue ids the rate card prices
SITE = "fra-1"
PLANNED_MS = 4_548_211  # 10 V100-hours of FP16 work on an H100 (docs/billing.md)


def js(value: Any) -> str:
    return json.dumps(value)


def register_node(
    client: LedgerClient,
    tpm: Any,
    node_id: str,
    ak_index: int,
    gpus: list[tuple[str, str]],
    org: str = "Org1MSP",
    policy_id: str = BOOT_POLICY,
    enrolment: dict | None = None,
) -> dict:
    """Register under `policy_id`, a PCR policy both organisations approved (conftest's
    `boot_policy` fixture, or `approve_pcr_policy`)."""
    request: dict[str, Any] = {
        "node_id": node_id,
        "org": org,
        "ak_public": tpm.ak_b64(ak_index),
        "gpus": [{"uuid": u, "generation": g} for u, g in gpus],
        "pcr_policy_id": policy_id,
    }
    request.update(enrolment or {})  # ek_binding and enrolment_quote, for an EK-bound node
    return json.loads(client.submit("RegisterNode", js(request)).payload)


def pcr_policy(golden: dict[str, str], max_age_s: int = DEFAULT_MAX_AGE_S) -> dict:
    """A governance document of kind pcr_policy: sha256 golden values and the age limit."""
    return {"pcrs": {"sha256": golden}, "max_age_s": max_age_s}


def engine_admins(ledger: Any, clock: Any = None) -> tuple[LedgerClient, LedgerClient]:
    """Admin@Org1 and Admin@Org2 (OU=admin) of an embedded ledger, for its governance."""
    from chaincode_client.embedded import EmbeddedClient
    from ledger.engine.msp import ROLE_ADMIN

    clients = [
        EmbeddedClient(
            ledger, ledger.enroll(org, f"Admin@{org}", ROLE_ADMIN), clock or time.time_ns
        )
        for org in ("Org1MSP", "Org2MSP")
    ]
    return clients[0], clients[1]


def open_ledger(path: Path, **options: Any) -> Any:
    """An embedded ledger whose organisations approved ZERO_POLICY_ID, for engine tests
    that register nodes only as something to write."""
    from ledger.engine import EmbeddedLedger

    ledger = EmbeddedLedger.open(path, **options)
    approve_on_engine(ledger, ZERO_POLICY_ID, ZERO_PCR_POLICY)
    return ledger


def approve_on_engine(ledger: Any, policy_id: str, document: dict, clock: Any = None) -> str:
    """Both organisations' admins of an embedded ledger approve a PCR policy."""
    decide(*engine_admins(ledger, clock), "pcr_policy", policy_id, document)
    return policy_id


def challenge(client: LedgerClient, node_id: str) -> bytes:
    """A nonce the ledger issued for the node's next quote (IssueChallenge)."""
    receipt = client.submit("IssueChallenge", js({"node_id": node_id}))
    return bytes.fromhex(json.loads(receipt.payload)["nonce"])


def readings_for(gpus: list[str], t_ms: int = 0) -> dict[str, str]:
    """Each GPU's batch of one reading at `t_ms` (its counter at t_ms mJ): what a quote binds
    and RecordAttestation carries ({gpu: CSV rows}, attest.readings)."""
    return {g: f"{t_ms},{g},{t_ms},0,0,0,0\n" for g in gpus}


def counter_readings(gpus: list[str], points: list[tuple[int, int]]) -> dict[str, str]:
    """Each GPU's batch of readings at (t_ms, counter mJ) `points`."""
    return {g: "".join(f"{t},{g},{mj},0,0,0,0\n" for t, mj in points) for g in gpus}


def digests_of(batch_rows: dict[str, str]) -> dict[str, str]:
    """{gpu: batch digest} of {gpu: rows} (canonical rows in time order, as these helpers
    write them): what the ledger derives and records."""
    return {g: readings.gpu_digest(rows.splitlines()) for g, rows in batch_rows.items()}


def batches_of(batch_rows: dict[str, str]) -> list[readings.Batch]:
    """The batches of {gpu: rows}, as a bill line cites them."""
    return [
        readings.Batch(g, d, batch_rows[g].count("\n"))
        for g, d in sorted(digests_of(batch_rows).items())
    ]


def telemetry_for(gpus: list[str], t_ms: int = 0) -> dict[str, str]:
    """Each GPU's batch digest of `readings_for`: the record's `telemetry`."""
    return digests_of(readings_for(gpus, t_ms))


def batches_for(gpus: list[str], t_ms: int = 0) -> list[readings.Batch]:
    """The batches of `readings_for`, as a bill line cites them."""
    return batches_of(readings_for(gpus, t_ms))


def quote_request(
    tpm: Any, node_id: str, ak_index: int, nonce: bytes, batch_rows: dict[str, str] | None = None
) -> dict:
    """A real quote over the ledger's nonce, bound to the digests of `batch_rows` ({gpu:
    rows}), which the request carries as its readings."""
    import base64

    extra = readings.qualifying_data(nonce, digests_of(batch_rows) if batch_rows else None)
    evidence = tpm.agent.quote(tpm.aks[ak_index], extra, "sha256:0,2,7")
    return {
        "node_id": node_id,
        "quote": base64.b64encode(evidence.quote).decode(),
        "signature": base64.b64encode(evidence.signature).decode(),
        "pcr_values": {
            "sha256": {str(i): v.hex() for i, v in evidence.pcr_values["sha256"].items()}
        },
        "nonce": nonce.hex(),
        **({"readings": batch_rows} if batch_rows else {}),
    }


def attest(
    client: LedgerClient,
    tpm: Any,
    node_id: str,
    ak_index: int,
    batch_rows: dict[str, str] | None = None,
) -> dict:
    """The honest round: ask the ledger for a challenge, quote over it (and over the node's
    readings {gpu: rows}, when given), record the answer."""
    request = quote_request(tpm, node_id, ak_index, challenge(client, node_id), batch_rows)
    receipt = client.submit("RecordAttestation", js(request))
    return json.loads(receipt.payload)


def attested_energy(
    client: LedgerClient,
    tpm: Any,
    node_id: str,
    ak_index: int,
    gpus: list[str],
    start_ms: int,
    end_ms: int,
    measured_mj: int,
) -> list[readings.Batch]:
    """Attest readings of `gpus` that show `measured_mj` over [start_ms, end_ms] (shared out,
    the remainder on the first GPU); the batches a line over that interval cites."""
    share, rest = divmod(measured_mj, len(gpus))
    batch_rows = {}
    for i, gpu in enumerate(sorted(gpus)):
        drawn = share + (rest if i == 0 else 0)
        batch_rows.update(counter_readings([gpu], [(start_ms, 0), (end_ms, drawn)]))
    attest(client, tpm, node_id, ak_index, batch_rows)
    return batches_of(batch_rows)


def now_ms() -> int:
    """Wall-clock milliseconds: every backend's ledger clock starts from it (conftest)."""
    return time.time_ns() // 1_000_000


def lease_terms(
    gpus: list[str],
    *,
    generation: str = H100,
    start_ms: int | None = None,
    planned_ms: int = PLANNED_MS,
    priority: int = 0,
    power_mw: int | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """Terms the deployed rate card accepts for `gpus` of `generation` at SITE."""
    card = RATE_CARD
    facts, site_terms = card.generations[generation], card.sites[SITE]
    terms = {
        "generation": generation,
        "precision": "FP16",
        "site": SITE,
        "priority": priority,
        "start_ms": now_ms() if start_ms is None else start_ms,
        "planned_ms": planned_ms,
        "pue_milli": site_terms["pue_milli"],
        "tariff_micro_per_kwh": site_terms["tariff_micro_per_kwh"],
        "capacity_micro_per_gpu_hour": card.capacity_rate(generation, priority),
        "attributed_power_mw": {
            uuid: facts.board_power_w * 1000 if power_mw is None else power_mw for uuid in gpus
        },
    }
    terms.update(overrides)
    return terms


def lease_request(
    lease_id: str,
    gpus: list[str],
    att_ids: list[str],
    tenant: str = "tenant-a",
    **terms: Any,
) -> str:
    return js(
        {
            "lease_id": lease_id,
            "tenant": tenant,
            "gpus": gpus,
            "terms": lease_terms(gpus, **terms),
            "attestation_ids": att_ids,
        }
    )


def settle_request(
    lease_id: str,
    seq: int,
    terms: dict[str, Any],
    start_ms: int,
    end_ms: int,
    measured_mj: int,
    *,
    final: bool = False,
    batches: list[readings.Batch] | None = None,
    **overrides: Any,
) -> dict[str, Any]:
    """An honest Settle request: the line computed by ledger.money from the lease's terms,
    citing `batches` (default: `batches_for` the terms' GPUs, which the test attested)."""
    line = money.interval_line(money.Terms.of(terms), start_ms, end_ms, measured_mj)
    if batches is None:
        batches = batches_for(sorted(terms["attributed_power_mw"]))
    request = schema.settle_args(
        lease_id,
        seq,
        {
            **terms,
            **line.as_dict(),
            schema.START_MS: start_ms,
            schema.END_MS: end_ms,
            schema.FINAL: final,
            schema.MEASURED: measured_mj,
            schema.DIGEST: readings.evidence_digest(batches),
            schema.BATCHES: [b.as_dict() for b in batches],
        },
    )
    request.update(overrides)
    return request


def bill_line(request: dict[str, Any], tx_id: str) -> dict[str, Any]:
    """The line `GET /api/v1/bills/` serves for a Settle `request` the ledger committed as
    `tx_id` (the fields `ledger audit-bill` compares, named as the bill names them)."""
    return {
        **schema.document(request),
        "lease": request["lease_id"],
        "seq": request["interval_seq"],
        "evidence": {"tx_id": tx_id},
    }


def bill_of(lines: list[dict[str, Any]], tenant: str = "tenant-a") -> dict[str, Any]:
    """A bill of `lines` as `GET /api/v1/bills/` serves one (webapp.leasing.bills.bill): every
    line the ledger recorded until now, whatever its month."""
    return {
        "tenant": tenant,
        "month": None,
        "period": {"start_ms": None, "end_ms": None},
        "as_of_ms": now_ms(),
        "count": len(lines),
        "total_micro": sum(line["total_micro"] for line in lines),
        "lines": lines,
    }


def org_roots(ledger_path: Path) -> dict[str, bytes]:
    """Each organisation's CA certificate, read from that organisation's own key folder (as an
    auditor would get it from the organisation), not from a receipt or the genesis block."""
    return org_ca_certs(msp_dir_for(ledger_path))


def software_ak_b64() -> str:
    """TPM2B_PUBLIC of a fresh software P-256 key: parseable, so RegisterNode accepts it, for
    engine tests that never attest (every attestation test quotes with a real swtpm)."""
    import base64

    from attest.public import software_ak_public

    return base64.b64encode(software_ak_public()).decode()


@functools.cache
def node_ak_b64(node_id: str) -> str:
    """`software_ak_b64` of one node, the same on every call: one AK, one node (the ledger
    refuses an AK another node holds: [enrol.ak_taken])."""
    return software_ak_b64()


def endorsement_refusal(call: Any, *arguments: Any, **keywords: Any) -> str:
    """The contract's whole refusal of `call(*arguments, **keywords)` (a submit, an evaluate or
    a helper that makes one): the last
    reason-coded message of the EndorsementError it raises, as on Fabric the error lists
    every endorsing peer's (the same message)."""
    try:
        call(*arguments, **keywords)
    except EndorsementError as refused:
        message = str(refused)
        return message[[m.start() for m in REASON_RE.finditer(message)][-1] :]
    raise AssertionError(f"{getattr(call, '__name__', call)} was not refused")


def refusal(call: Any, *arguments: Any, **keywords: Any) -> str:
    """The whole message of the refusal `call(*arguments, **keywords)` must raise: a
    contract rule's ContractError, a parser's ValueError, a lookup's KeyError."""
    try:
        call(*arguments, **keywords)
    except KeyError as refused:
        return str(refused.args[0])
    except (ContractError, ValueError) as refused:
        return str(refused)
    raise AssertionError(f"{getattr(call, '__name__', call)} refused nothing")
