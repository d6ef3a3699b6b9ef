"""`org init|secret|join|commit|status PARTY` and `channel create`: the bring-up's steps, each
run on one party's own host (the loopback `up` runs the same steps for every party at once).

On separate hosts, in this order (docs/operations.md has the runbook):

1. `org init orderer0`: the ordering organisation's CA and admin; publishes `public/OrdererMSP`.
   `org secret orderer1` (there) prints orderer1's one-time enrollment secret.
2. `org init orderer1 --enroll-secret S` (on orderer1's host, with `public/OrdererMSP`), the
   same for orderer2; `org init Org1MSP`, `org init Org2MSP` on theirs. Each publishes
   `public/<name>`; only those folders cross between hosts.
3. `channel create` on a host holding every public folder: the genesis block (public).
4. `org join` on every orderer's host (orderer0 last: its admin joins the orderers to the
   channel), then on each organisation's host: its peer joins, its chaincode server starts,
   it approves the contract.
5. `org commit Org1MSP` (one organisation): the contract is committed; both must endorse.
"""

from __future__ import annotations

import argparse
import json

from chaincode_client.fabric import FabricGatewayClient
from chaincode_client.fabric.receipts import export_fabric_receipt
from chaincode_client.fabric_network import orgs
from chaincode_client.fabric_network.layout import Layout, NetworkError
from chaincode_client.fabric_network.network import Network
from chaincode_client.fabric_network.view import endorsed


def run_party(layout: Layout, args: argparse.Namespace) -> int:
    if args.command in ("receipt", "view"):
        env = layout.client_env(args.org)
        env["FABRIC_CHAINCODE"] = args.chaincode or layout.chaincode
        client = FabricGatewayClient.from_env(env)
        try:
            if args.command == "view":
                print(json.dumps(endorsed(client, args.org), indent=2))
                return 0
            text = json.dumps(export_fabric_receipt(client, args.lease_id))
        except KeyError as exc:
            raise NetworkError(str(exc)) from exc
        finally:
            client.close()
        if args.out:
            args.out.write_text(text)
        else:
            print(text)
        return 0
    if args.command == "channel":
        network = Network.create(layout, parties=frozenset())
        network.run_steps([("channel genesis block (configtxgen)", network.genesis)])
        print(f"genesis block: {network.genesis_block}")
        return 0
    party = args.party
    if party not in layout.parties:
        raise NetworkError(f"party {party!r}: expected one of {list(layout.parties)}")
    network = Network.create(layout, parties=frozenset({party}))
    if args.action == "init":
        secrets = {party: args.enroll_secret} if args.enroll_secret else None
        seconds = network.run_steps(
            [(f"{party}'s identities", lambda: network.init_identities(secrets))]
        )
        print(f"{party} initialised in {seconds:.1f}s; publish {layout.root / 'public'}")
    elif args.action == "secret":
        orderer = next((o for o in layout.orderers if o.name == party), None)
        if orderer is None:
            raise NetworkError(f"`org secret` is for orderers, not {party}")
        print(orgs.orderer_secret(layout, orderer))
    elif args.action == "join":
        approve = (f"chaincode {layout.chaincode!r} approved", network.approve_default)
        seconds = network.run_steps([*network.join_steps(), approve])
        print(f"{party} joined in {seconds:.1f}s")
    elif args.action == "commit":  # (approving first, if this host's org has not)
        seconds = network.run_steps(network.commit_steps())
        print(f"{party} committed in {seconds:.1f}s")
    else:
        print(json.dumps(network.status(), indent=2))
    return 0
