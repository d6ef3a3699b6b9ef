"""`python -m chaincode_client.fabric_network roots`: the channel's trust roots an auditor
checks Fabric receipts against, read from the MSP folders each organisation published (CAs
made at run time, laid out where `org init` publishes them)."""

from __future__ import annotations

from chaincode_client.fabric_network.__main__ import main
from chaincode_client.fabric_network.layout import ORDERER_MSP, Layout
from ledger.audit.fabric_trust import parse_roots
from tests.ledger.fabric_chain import Org


def lay_out_cas(layout: Layout) -> dict[str, Org]:
    cas = {ORDERER_MSP: Org(ORDERER_MSP)} | {o.msp_id: Org(o.msp_id) for o in layout.orgs}
    for msp_id in cas:
        folder = layout.public_dir(msp_id)
        (folder / "msp" / "cacerts").mkdir(parents=True)
        (folder / "msp" / "cacerts" / "ca-cert.pem").write_bytes(cas[msp_id].pem)
    return cas


def test_roots_writes_every_organisations_root_ca_with_its_role(tmp_path, capsys):
    layout = Layout(tmp_path / "net")
    cas = lay_out_cas(layout)
    out = tmp_path / "roots.pem"
    assert main(["--root", str(layout.root), "roots", "--out", str(out)]) == 0
    roots = parse_roots(out.read_bytes())
    assert (roots.channel, roots.chaincode) == ("wattlease", "wattlease")
    assert roots.orderers == {ORDERER_MSP: [cas[ORDERER_MSP].cert]}
    assert sorted(roots.orgs) == ["Org1MSP", "Org2MSP"]
    assert roots.orgs["Org2MSP"] == [cas["Org2MSP"].cert]


def test_roots_of_a_network_without_its_ca_certificates_fails_naming_the_folder(tmp_path, capsys):
    layout = Layout(tmp_path / "net")
    assert main(["--root", str(layout.root), "roots"]) == 1
    assert "expected one CA certificate in" in capsys.readouterr().err
