"""Two organisations on separate hosts (network namespaces this module makes): each one's keys
are made on its own host by its own Fabric CA, the network is formed from public material
only, a lease runs from request to settled bill through the contract, and the second
organisation audits the bill with its own copy of the ledger and the trust roots it holds."""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from chaincode_client.fabric import FabricGatewayClient
from chaincode_client.fabric.receipts import export_fabric_receipt
from chaincode_client.fabric_network.roots import roots_pem
from chaincode_client.interface import LedgerUnavailable
from tests.fabric import netns
from tests.fabric.split_network import ORGS, PARTIES, AppView, split_network
from tests.webapp import leases
from tests.webapp.bill_audit import Evidence, fetch_evidence, run_audit
from tests.webapp.fabric_app import app_on_fabric
from tests.webapp.test_fabric_receipts import relay_all
from webapp.core.demo_governance import admin_clients
from webapp.leasing import actions

pytestmark = pytest.mark.fabric
ACTOR = "test"
RECEIPT_WAIT_S = 30


@pytest.fixture(scope="module")
def split(tmp_path_factory):
    why = netns.available()
    if why:
        pytest.fail(f"separate hosts need network namespaces: {why}")  # never a silent skip
    with split_network(tmp_path_factory.mktemp("hosts")) as network:
        seconds = network.up()
        print(f"bring-up from empty hosts: {seconds:.1f}s; " + "; ".join(network.log))
        yield network


@pytest.fixture
def ledger(settings, split, monkeypatch):
    """Overrides the embedded `ledger` of tests/webapp/conftest.py: the app as Org1's, on
    Org1's host, talking to Org1's peer."""
    with app_on_fabric(settings, AppView(split), monkeypatch) as client:
        yield client


@pytest.fixture
def ledger_admins(ledger, split):
    """Each organisation's admin on its own host, with the key its own CA issued there."""
    with admin_clients(AppView(split)) as admins:
        yield admins


def private_keys(folder: Path) -> dict[bytes, Path]:
    """Every private key under `folder`, by its public key."""
    found = {}
    for path in folder.rglob("*"):
        if path.is_file() and b"PRIVATE KEY-----" in path.read_bytes()[:200]:
            key = serialization.load_pem_private_key(path.read_bytes(), password=None)
            public = key.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            found[public] = path
    return found


def digests(folder: Path) -> dict[str, Path]:
    return {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in folder.rglob("*") if p.is_file()}


def test_each_organisations_keys_are_made_and_kept_on_its_own_host(split):
    keys = {party: private_keys(split.root(party)) for party in PARTIES}
    for party, found in keys.items():
        assert found, f"{party}'s host holds no key"
        own = split.root(party) / "hosts" / party
        strays = [p for p in found.values() if not p.is_relative_to(own)]
        assert not strays, f"{party}'s host holds keys outside its own folder: {strays}"
    for party in PARTIES:
        for other in PARTIES:
            if other != party:
                shared = set(keys[party]) & set(keys[other])
                assert not shared, f"{party} and {other} share keys: {shared}"

    # what both organisations hold alike is public: the plan, certificates, the genesis block
    org1, org2 = (digests(split.root(g)) for g in ORGS)
    for digest in set(org1) & set(org2):
        relative = org1[digest].relative_to(split.root("Org1MSP"))
        assert relative.parts[0] in ("public", "config", "plan.json"), relative
        assert b"PRIVATE KEY" not in org1[digest].read_bytes(), relative
    assert not (split.root("Org2MSP") / "hosts" / "Org1MSP").exists()

    # each peer's TLS certificate names its own host only
    for org in split.layout("Org1MSP").orgs:
        cert_path = split.layout(org.msp_id).peer_dir(org) / "tls" / "server.crt"
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = {str(n.value) for n in names}
        assert sans == {org.peer_host, split.hosts.addresses[org.msp_id]}, sans


def org2_receipts(split, chaincode: str, lines: list[dict], folder: Path) -> Path:
    """Org2, on its own host, exports each line's lease receipt from its own peer's ledger,
    once that peer holds the line's settlement."""
    folder.mkdir()
    env = {**split.client_env("Org2MSP"), "FABRIC_CHAINCODE": chaincode}
    client = FabricGatewayClient.from_env(env)
    try:
        for line in lines:
            deadline = time.monotonic() + RECEIPT_WAIT_S
            while True:  # until Org2's peer has the blocks Org1's app saw committed
                try:
                    receipt = export_fabric_receipt(client, line["lease"])
                    shown = {t["tx_id"] for t in receipt["transactions"]}
                    if line["evidence"]["tx_id"] in shown:
                        break
                except (LedgerUnavailable, LookupError):
                    pass
                assert time.monotonic() < deadline, f"Org2's peer lacks {line}"
                time.sleep(0.5)
            (folder / f"{line['lease']}.json").write_text(json.dumps(receipt))
    finally:
        client.close()
    return folder


def test_a_lease_runs_to_a_settled_bill_that_the_second_organisation_audits(
    fleet, owner, attested_node, node_agent, ledger, split, tmp_path
):
    placed = leases.placed(owner.tenant, fleet.gpus[:2], [attested_node])
    lease = leases.settled_from_readings(actions.activate_lease(placed, actor=ACTOR), node_agent)
    relay_all(ledger)

    tenant = fetch_evidence(owner.client, tmp_path / "tenant")  # the bill the tenant got
    [line] = tenant.bill["lines"]
    assert line["lease"] == str(lease.ledger_id) and line["measured_energy_mj"] == 2 * 600

    # Org2's side: its own receipts (its peer), the roots its own host holds (its CA's
    # certificate and the ones Org1 and the orderers published to it)
    receipts = org2_receipts(split, ledger.chaincode, [line], tmp_path / "org2")
    evidence = Evidence(tenant.bill, receipts, tenant.readings)
    roots = roots_pem(split.layout("Org2MSP"), ledger.chaincode)
    code, out = run_audit(tmp_path / "org2", evidence, roots)
    assert code == 0 and "1 of 1 lines hold" in out, out
