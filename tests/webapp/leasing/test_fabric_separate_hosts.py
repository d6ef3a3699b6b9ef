"""Two organisations on separate hosts (network namespaces this module makes): each one's keys
are made on its own host by its own Fabric CA, the network is formed from public material
only, a lease runs from request to settled bill through the contract, and the second
organisation audits the bill with its own copy of the ledger and the trust roots it holds."""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import subprocess
import sys
import threading
import time
from decimal import Decimal
from pathlib import Path

import pytest
from cryptography import x509
from cryptography.hazmat.primitives import serialization

from chaincode_client.fabric.errors import PEERS_BEHIND_PREFIX
from chaincode_client.fabric_network.fabric_ca import SECRETS_FILE
from chaincode_client.fabric_network.roots import roots_pem
from tests.fabric import netns
from tests.fabric.split_network import ORGS, PARTIES, AppView, split_network
from tests.webapp import leases
from tests.webapp.bill_audit import Evidence, fetch_evidence, run_audit
from tests.webapp.fabric_app import app_on_fabric
from tests.webapp.helpers import place, trust_ek_ca
from tests.webapp.leasing.test_fabric_receipts import relay_all
from webapp.demo.governance import admin_clients
from webapp.demo.seed import gpu_uuid
from webapp.fleet.models import GPU
from webapp.leasing import actions
from webapp.leasing.models import Lease
from webapp.outbox.models import OutboxEntry
from webapp.outbox.relay import relay_once

pytestmark = pytest.mark.fabric
ACTOR = "test"
RECEIPT_WAIT_S = 30
REGISTRAR = [sys.executable, "-m", "attest", "registrar"]
REPO = Path(__file__).resolve().parents[3]


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
def trusted_ca(settings, tmp_path, ca, split):
    """conftest's, but each organisation's registrar runs as the service it is
    (`python -m attest registrar serve`) on its own host: its key made and kept in that
    host's folder, listening on the host's address. The web app, Org1's on Org1's host,
    reaches Org2's registrar across the network, as in a deployment."""
    directory = trust_ek_ca(settings, tmp_path, ca)
    urls, services = {}, []
    try:
        for org in ORGS:
            home = split.root(org) / "hosts" / org / "registrar"
            shutil.copytree(directory, home / "ek-roots", dirs_exist_ok=True)
            key = home / "registrar.pem"
            if not key.exists():
                made = split.hosts.run(org, [*REGISTRAR, "keygen", "--out", str(key)], cwd=REPO)
                assert made.returncode == 0, made.stderr
            service = subprocess.Popen(
                ["ip", "netns", "exec", split.hosts.namespaces[org], *REGISTRAR, "serve",
                 "--org", org, "--key", str(key), "--ek-roots", str(home / "ek-roots"),
                 "--listen", f"{split.hosts.addresses[org]}:0"],
                cwd=REPO, stdout=subprocess.PIPE, text=True,
            )  # fmt: skip
            services.append(service)
            listening = json.loads(service.stdout.readline() or "{}").get("listening", "")
            assert listening.startswith("http://"), f"{org}'s registrar did not start"
            urls[org] = "http://" + split.forward(ORGS[0], listening.removeprefix("http://"))
        settings.REGISTRARS = urls
        yield directory
    finally:
        for service in services:
            service.terminate()
            service.wait(timeout=10)


@pytest.fixture
def ledger(settings, split, monkeypatch):
    """Overrides the embedded `ledger` of tests/webapp/conftest.py: the app as Org1's, on
    Org1's host, talking to Org1's peer, on a contract namespace of its own."""
    chaincode = split.new_chaincode(f"c{len(split.log)}")
    with app_on_fabric(settings, AppView(split), monkeypatch, chaincode) as client:
        yield client


@pytest.fixture
def ledger_admins(ledger, split):
    """Each organisation's admin on its own host, with the key its own CA issued there."""
    with admin_clients(AppView(split)) as admins:
        yield admins


def secrets_under(folder: Path) -> dict[bytes, Path]:
    """Every private key or secret under `folder` (PEM private keys, anything in a keystore,
    the CA's enrollment secrets), each by its public key where it has one, else its bytes."""
    found = {}
    for path in folder.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if b"PRIVATE KEY-----" in data[:200]:
            try:
                key = serialization.load_pem_private_key(data, password=None)
            except ValueError:  # Fabric CA's Idemix revocation key: kept by its bytes
                found[data] = path
                continue
            public = key.public_key().public_bytes(
                serialization.Encoding.DER, serialization.PublicFormat.SubjectPublicKeyInfo
            )
            found[public] = path
        elif path.parent.name == "keystore" or path.name == SECRETS_FILE:
            found[data] = path
    return found


def digests(folder: Path) -> dict[str, Path]:
    return {hashlib.sha256(p.read_bytes()).hexdigest(): p for p in folder.rglob("*") if p.is_file()}


def test_each_organisations_keys_are_made_and_kept_on_its_own_host(split):
    keys = {party: secrets_under(split.root(party)) for party in PARTIES}
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

    # what both organisations hold alike is public (certificates, the plan, the genesis block,
    # files any two nodes write alike): no byte of a secret, no other host's folder
    org1, org2 = (digests(split.root(g)) for g in ORGS)
    secret_files = {p for found in keys.values() for p in found.values()}
    shared = set(org1) & set(org2)
    assert any(org1[d].is_relative_to(split.root("Org1MSP") / "public") for d in shared)
    for digest in shared:
        assert {org1[digest], org2[digest]}.isdisjoint(secret_files), org1[digest]
        assert b"PRIVATE KEY" not in org1[digest].read_bytes(), org1[digest]
    for first, second in (ORGS, ORGS[::-1]):
        assert not (split.root(first) / "hosts" / second).exists()
        assert (split.root(first) / "public" / second / "msp" / "cacerts").is_dir()

    # each peer's TLS certificate names its own host only
    for org in split.layout("Org1MSP").orgs:
        cert_path = split.layout(org.msp_id).peer_dir(org) / "tls" / "server.crt"
        cert = x509.load_pem_x509_certificate(cert_path.read_bytes())
        names = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
        sans = {str(n.value) for n in names}
        assert sans == {org.peer_host, split.hosts.addresses[org.msp_id]}, sans


def org2_receipts(split, chaincode: str, lines: list[dict], folder: Path) -> Path:
    """On Org2's host, `receipt` exports each line's lease receipt from Org2's own peer with
    Org2's own identity, once that peer holds the line's settlement."""
    folder.mkdir()
    for line in lines:
        out = folder / f"{line['lease']}.json"
        deadline = time.monotonic() + RECEIPT_WAIT_S
        while True:  # until Org2's peer has the blocks Org1's app saw committed
            done = split.run("Org2MSP", "receipt", "Org2MSP", line["lease"],
                             "--chaincode", chaincode, "--out", str(out))  # fmt: skip
            if done.returncode == 0:
                shown = {t["tx_id"] for t in json.loads(out.read_text())["transactions"]}
                if line["evidence"]["tx_id"] in shown:
                    break
            assert time.monotonic() < deadline, f"Org2's peer lacks {line}: {done.stderr}"
            time.sleep(0.5)
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

    # Org2's read-only view, from its own peer: what it endorsed (the node, the lease, its line)
    done = split.run("Org2MSP", "view", "Org2MSP", "--chaincode", ledger.chaincode)
    assert done.returncode == 0, done.stderr
    view = json.loads(done.stdout)
    endorsed = view["endorsed"]
    assert endorsed["CreateLease"] == 1 and endorsed["Settle"] == 1, view
    assert endorsed["RegisterNode"] >= 1 and view["nodes"], view
    assert line["lease"] in view["leases"], view


# -- faults across hosts: an organisation cut off, an orderer host down ------------------

LEASES = 12
PARTITION_S = 20
DRAIN_TIMEOUT_S = 300
ORDERER_DOWN_LEASES = 4


@pytest.fixture
def fleet(fleet):
    """conftest's fleet with two GPUs per lease of the stream, all registered on the ledger
    with the node (an ended lease keeps its GPUs until it is settled)."""
    generation = fleet.gpus[0].generation
    fleet.gpus += [
        GPU.objects.create(
            uuid=gpu_uuid(fleet.node.name, i), node=fleet.node, index=i, generation=generation
        )
        for i in range(len(fleet.gpus), 2 * (LEASES + ORDERER_DOWN_LEASES + 1))
    ]
    return fleet


def stream(tenant, fleet, attested_node, ledger, first: int, count: int) -> list[Lease]:
    """`count` leases, each requested, placed, started and ended, relayed as they come."""
    out = []
    for i in range(first, first + count):
        lease = actions.request_lease(
            tenant, gpu_count=2, precision="FP16", hours=Decimal(1), actor=ACTOR
        )
        lease = place(lease, fleet.gpus[2 * i : 2 * i + 2], [attested_node])
        actions.activate_lease(lease, actor=ACTOR)
        actions.end_lease(lease, actor=ACTOR)
        out.append(lease)
        relay_once(ledger)
        time.sleep(0.3)  # a stream, not a burst
    return out


def drain(ledger) -> None:
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    while OutboxEntry.objects.exclude(status=OutboxEntry.DONE).exists():
        rejected = OutboxEntry.objects.filter(status=OutboxEntry.REJECTED)
        assert not rejected.exists(), list(rejected.values("function", "last_error"))
        left = OutboxEntry.objects.exclude(status=OutboxEntry.DONE)
        assert time.monotonic() < deadline, list(left.values("function", "attempts", "last_error"))
        relay_once(ledger)
        time.sleep(0.5)


def committed_once(ledger, leases_: list[Lease]) -> None:
    for lease in leases_:
        lease_id = Lease.objects.get(pk=lease.pk).ledger_id
        key = json.dumps({"key": f"lease:{lease_id}"})
        history = json.loads(ledger.evaluate("GetHistory", key))
        statuses = [version["value"]["status"] for version in history]
        assert statuses.count("ACTIVE") == 1 and statuses.count("ENDED") == 1, (lease_id, history)


def retries(caplog) -> list[str]:
    return [r.getMessage() for r in caplog.records if "retry in" in r.getMessage()]


def test_leases_wait_while_the_second_organisation_is_cut_off_and_drain_when_it_returns(
    fleet, tenant, attested_node, ledger, split, caplog
):
    caplog.set_level(logging.WARNING, logger="webapp.outbox.relay")
    tenant.max_gpus = len(fleet.gpus)
    tenant.save(update_fields=["max_gpus"])
    events: dict[str, float] = {}

    def partition() -> None:
        time.sleep(1.5)
        split.hosts.link("Org2MSP", up=False)
        events["cut"] = time.monotonic()
        time.sleep(PARTITION_S)
        split.hosts.link("Org2MSP", up=True)
        events["restored"] = time.monotonic()

    injector = threading.Thread(target=partition)
    injector.start()
    try:
        leases_ = stream(tenant, fleet, attested_node, ledger, 0, LEASES)
    finally:
        injector.join()
        split.hosts.link("Org2MSP", up=True)
    drain(ledger)
    drained_s = time.monotonic() - events["restored"]
    committed_once(ledger, leases_)
    during = retries(caplog)
    assert during, "the partition caused no retry: it did not land during the stream"
    attempts = max(OutboxEntry.objects.values_list("attempts", flat=True))
    print(
        f"partition {PARTITION_S}s: {len(leases_)} leases, 0 lost, 0 doubled, "
        f"{len(during)} retries (most attempts of one row: {attempts}), backlog drained "
        f"{drained_s:.1f}s after the link returned"
    )

    # one orderer host of three cut off: the stream goes on
    caplog.clear()
    split.hosts.link("orderer0", up=False)
    try:
        started = time.monotonic()
        more = stream(tenant, fleet, attested_node, ledger, LEASES, ORDERER_DOWN_LEASES)
        drain(ledger)
        seconds = time.monotonic() - started
    finally:
        split.hosts.link("orderer0", up=True)
    committed_once(ledger, more)
    behind = [r for r in retries(caplog) if PEERS_BEHIND_PREFIX in r]
    print(
        f"orderer0's host cut off: {len(more)} leases committed in {seconds:.1f}s, "
        f"{len(retries(caplog))} retries, {len(behind)} of them Org2's peer behind"
    )
    # no submit failed: a gateway that picked the cut-off orderer moves on to another within
    # the client's submit deadline (configs.GATEWAY_BROADCAST_TIMEOUT). Org2's peer, if it
    # pulled blocks from orderer0, is behind until its delivery client's keepalive gives up
    # and it reconnects (configs.KEEPALIVE_*); meanwhile it cannot endorse a lease's next
    # step, which waits (relay.PEERS_BEHIND_RETRY_S) and goes through once it caught up.
    assert not [r for r in retries(caplog) if r not in behind], retries(caplog)
