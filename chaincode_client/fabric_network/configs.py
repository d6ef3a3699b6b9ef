"""The configuration files of a network, written from a `Layout`.

Each MSP's `config.yaml` (NodeOUs, so identities carry the admin/client/peer/orderer role the
contract checks), configtxgen's channel profile (Raft consenters, both organisations with
their anchor peers, the policies; read from the parties' public folders only) and each node's
core.yaml / orderer.yaml: Fabric's own sample file with this node's addresses, keys and
folders set, so every setting a node runs with can be read in its folder.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml  # type: ignore[import-untyped]  # (no stubs pinned)

from chaincode_client.fabric_network.layout import (
    ORDERER_MSP,
    FabricInstall,
    Layout,
    Orderer,
    Org,
)

# Blocks are cut after this long or this many transactions, whichever comes first: short
# enough that one submit waits little, large enough that a busy relay fills blocks. The
# timeout bounds the throughput of a client with few transactions in flight (in flight /
# latency): 100 ms instead of 250 ms took 16 in flight from ~46 to ~77 committed tx/s at the
# same CPU per transaction (docs/benchmarks-fabric.md).
BATCH_TIMEOUT = "100ms"
BATCH_MAX_MESSAGES = 500
ENDORSEMENT_POLICY = "AND('Org1MSP.peer','Org2MSP.peer')"
# What an operator sets for throughput, in the environment each orderer and peer reads (a
# value already in the environment wins). Fabric's INFO lines for every gRPC call, proposal,
# gateway request and orderer broadcast become warnings-only; block commits, Raft elections
# and the rest stay at INFO. Go's collector runs at 400 % heap growth instead of 100 %: ~10 %
# less CPU in peers and orderers, whose heaps are tens of MiB (measured: benchmarks-fabric.md).
NODE_ENV_DEFAULTS = {
    "FABRIC_LOGGING_SPEC": "info:comm.grpc.server,endorser,gateway,"
    "orderer.common.broadcast=warning",
    "GOGC": "400",
}
# Gossip retries a refused connection (the other organisation's peer still starting) after
# this long; Fabric's 25 s default made some bring-ups wait that long for discovery.
GOSSIP_RECONNECT_INTERVAL = "3s"
# how often a peer tells the others which chaincodes it runs (Fabric's default 4s): a gateway
# can route a new definition's proposals to the other organisations only after this
GOSSIP_STATE_INFO_INTERVAL = "1s"
PEER_EXECUTE_TIMEOUT = "30s"
# How long a peer's gateway waits for one orderer to take a transaction before it tries the
# next (Fabric's sample: 30s). Below the client's submit deadline (5 s,
# chaincode_client.fabric.config.DEFAULT_SUBMIT_TIMEOUT_S), so an orderer whose host is cut
# off (its connection hangs, nothing refuses it) costs a transaction 2 s, not a failed
# submit and a retry: measured with one orderer host of three cut off
# (tests/webapp/leasing/test_fabric_separate_hosts.py, docs/benchmarks-fabric.md).
GATEWAY_BROADCAST_TIMEOUT = "2s"
# A host cut off drops packets without refusing anything: a connection to it hangs until a
# keepalive ping goes unanswered. Fabric's sample pings every 60 s and waits 20 s (and its
# delivery client backs off up to an hour between reconnects), so a peer that was pulling
# blocks from an orderer whose host went away, or that was cut off itself, stayed behind for
# a minute or more after the network came back: transactions it must endorse were refused
# meanwhile ("lease does not exist" on its stale state). Ping every 10 s, give up after 5 s,
# reconnect at least every 10 s; servers accept pings every 5 s.
KEEPALIVE_INTERVAL = "10s"
KEEPALIVE_TIMEOUT = "5s"
KEEPALIVE_MIN_INTERVAL = "5s"
DELIVERY_RECONNECT_BACKOFF_MAX = "10s"


def write_yaml(path: Path, doc: Any) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(doc, sort_keys=False))


def nodeous_config(cacert: str) -> dict[str, Any]:
    """An MSP's config.yaml: roles from the OU Fabric CA writes (`--id.type`), issued by the
    CA whose certificate is `cacerts/<cacert>`."""

    def ou(name: str) -> dict[str, str]:
        return {"Certificate": f"cacerts/{cacert}", "OrganizationalUnitIdentifier": name}

    return {
        "NodeOUs": {
            "Enable": True,
            "ClientOUIdentifier": ou("client"),
            "PeerOUIdentifier": ou("peer"),
            "AdminOUIdentifier": ou("admin"),
            "OrdererOUIdentifier": ou("orderer"),
        }
    }


def _signature(rule: str) -> dict[str, str]:
    return {"Type": "Signature", "Rule": rule}


def _implicit(rule: str) -> dict[str, str]:
    return {"Type": "ImplicitMeta", "Rule": rule}


def _peer_org(layout: Layout, org: Org) -> dict[str, Any]:
    m = org.msp_id
    return {
        "Name": m,
        "ID": m,
        "MSPDir": str(layout.public_dir(m) / "msp"),
        "Policies": {
            "Readers": _signature(f"OR('{m}.admin', '{m}.peer', '{m}.client')"),
            "Writers": _signature(f"OR('{m}.admin', '{m}.client')"),
            "Admins": _signature(f"OR('{m}.admin')"),
            "Endorsement": _signature(f"OR('{m}.peer')"),
        },
        "AnchorPeers": [{"Host": org.ip, "Port": org.peer_port}],
    }


def configtx(layout: Layout) -> dict[str, Any]:
    """configtxgen's input: one profile, the application channel's genesis block."""
    orderer_org = {
        "Name": ORDERER_MSP,
        "ID": ORDERER_MSP,
        "MSPDir": str(layout.public_dir(ORDERER_MSP) / "msp"),
        "Policies": {
            "Readers": _signature(f"OR('{ORDERER_MSP}.member')"),
            "Writers": _signature(f"OR('{ORDERER_MSP}.member')"),
            "Admins": _signature(f"OR('{ORDERER_MSP}.admin')"),
        },
        "OrdererEndpoints": [o.address for o in layout.orderers],
    }
    consenters = [
        {
            "Host": o.ip,
            "Port": o.port,
            "ClientTLSCert": str(layout.consenter_cert(o)),
            "ServerTLSCert": str(layout.consenter_cert(o)),
        }
        for o in layout.orderers
    ]
    standard = {
        "Readers": _implicit("ANY Readers"),
        "Writers": _implicit("ANY Writers"),
        "Admins": _implicit("MAJORITY Admins"),
    }
    profile = {
        "Policies": standard,
        "Capabilities": {"V2_0": True},
        "Orderer": {
            "OrdererType": "etcdraft",
            "Addresses": [o.address for o in layout.orderers],
            "BatchTimeout": BATCH_TIMEOUT,
            "BatchSize": {
                "MaxMessageCount": BATCH_MAX_MESSAGES,
                "AbsoluteMaxBytes": "99 MB",
                "PreferredMaxBytes": "2 MB",
            },
            "EtcdRaft": {"Consenters": consenters},
            "Organizations": [orderer_org],
            "Policies": {**standard, "BlockValidation": _implicit("ANY Writers")},
            "Capabilities": {"V2_0": True},
        },
        "Application": {
            "Organizations": [_peer_org(layout, g) for g in layout.orgs],
            "Policies": {
                **standard,
                "LifecycleEndorsement": _implicit("MAJORITY Endorsement"),
                "Endorsement": _implicit("MAJORITY Endorsement"),
            },
            "Capabilities": {"V2_5": True},
        },
    }
    return {"Profiles": {"WattleaseChannel": profile}}


def orderer_yaml(install: FabricInstall, layout: Layout, orderer: Orderer) -> dict[str, Any]:
    doc = yaml.safe_load((install.config_dir / "orderer.yaml").read_text())
    tls = layout.orderer_dir(orderer) / "tls"
    data = layout.node_dir(orderer.name) / "data"
    general = doc["General"]
    general.update(ListenAddress=orderer.ip, ListenPort=orderer.port, BootstrapMethod="none")
    general["TLS"].update(
        Enabled=True,
        PrivateKey=str(tls / "server.key"),
        Certificate=str(tls / "server.crt"),
        RootCAs=[str(tls / "ca.crt")],
        ClientAuthRequired=False,
    )
    general["Keepalive"]["ServerMinInterval"] = KEEPALIVE_MIN_INTERVAL
    general["Cluster"].update(
        ClientCertificate=str(tls / "server.crt"),
        ClientPrivateKey=str(tls / "server.key"),
        RootCAs=[str(tls / "ca.crt")],
    )
    general.update(LocalMSPDir=str(layout.orderer_dir(orderer) / "msp"), LocalMSPID=ORDERER_MSP)
    doc["FileLedger"]["Location"] = str(data / "ledger")
    doc["Consensus"].update(WALDir=str(data / "wal"), SnapDir=str(data / "snap"))
    doc["Operations"]["ListenAddress"] = f"{orderer.ip}:{orderer.ops_port}"
    doc["Admin"]["ListenAddress"] = f"{orderer.ip}:{orderer.admin_port}"
    doc["Admin"]["TLS"].update(
        Enabled=True,
        Certificate=str(tls / "server.crt"),
        PrivateKey=str(tls / "server.key"),
        ClientAuthRequired=True,
        ClientRootCAs=[str(layout.orderer_tls_ca())],
    )
    doc["ChannelParticipation"]["Enabled"] = True
    return doc


def core_yaml(install: FabricInstall, layout: Layout, org: Org) -> dict[str, Any]:
    doc = yaml.safe_load((install.config_dir / "core.yaml").read_text())
    tls = layout.peer_dir(org) / "tls"
    peer = doc["peer"]
    address = org.peer_address
    peer.update(
        id=org.peer_host,
        networkId="wattlease",
        listenAddress=address,
        address=address,
        chaincodeListenAddress=f"{org.ip}:{org.chaincode_port}",
        chaincodeAddress=f"{org.ip}:{org.chaincode_port}",
        mspConfigPath=str(layout.peer_dir(org) / "msp"),
        localMspId=org.msp_id,
        fileSystemPath=str(layout.node_dir(org.peer_name) / "data"),
    )
    peer["gossip"].update(
        bootstrap=address,
        externalEndpoint=address,
        useLeaderElection=False,
        orgLeader=True,
        reconnectInterval=GOSSIP_RECONNECT_INTERVAL,
        publishStateInfoInterval=GOSSIP_STATE_INFO_INTERVAL,
    )
    peer["tls"].update(
        enabled=True,
        clientAuthRequired=layout.client_mtls,
        cert={"file": str(tls / "server.crt")},
        key={"file": str(tls / "server.key")},
        rootcert={"file": str(tls / "ca.crt")},
        clientRootCAs={"files": [str(layout.peer_tls_ca(g)) for g in layout.orgs]},
    )
    doc["vm"]["endpoint"] = ""  # no Docker: chaincode runs as a service (CCaaS)
    doc["chaincode"]["externalBuilders"] = [
        {"name": "ccaas", "path": str(install.ccaas_dir), "propagateEnvironment": []}
    ]
    doc["chaincode"]["executetimeout"] = PEER_EXECUTE_TIMEOUT
    doc["peer"]["gateway"]["broadcastTimeout"] = GATEWAY_BROADCAST_TIMEOUT
    keepalive = doc["peer"]["keepalive"]
    keepalive["minInterval"] = KEEPALIVE_MIN_INTERVAL
    for client in ("client", "deliveryClient"):
        keepalive[client].update(interval=KEEPALIVE_INTERVAL, timeout=KEEPALIVE_TIMEOUT)
    doc["peer"]["deliveryclient"]["reConnectBackoffThreshold"] = DELIVERY_RECONNECT_BACKOFF_MAX
    doc["ledger"]["snapshots"]["rootDir"] = str(layout.node_dir(org.peer_name) / "snapshots")
    doc["operations"]["listenAddress"] = f"{org.ip}:{org.ops_port}"
    return doc
