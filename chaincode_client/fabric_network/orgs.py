"""Each party's identities, made on its own host by its own organisation's Fabric CA.

- An application organisation (`Org1MSP`, ...) starts its CA server, enrolls its peer (MSP and
  TLS), its `Admin` (NodeOU admin) and `User1` (NodeOU client) with TLS client pairs, and its
  chaincode server's TLS pair, then publishes its MSP (CA and TLS CA certificates, NodeOUs).
- The ordering organisation's CA and admin sit on orderer0's host; it registers every
  orderer. Each orderer enrolls from its own host, over the network, with the one-time secret
  the ordering organisation's admin gave it, and publishes its TLS certificate (the channel
  names it as a consenter).

Everything is written in the shape cryptogen used (`msp/`, `tls/server.crt`, `users/Admin@…`),
so the nodes' configuration and the clients read the same paths. Every step is skipped when
its output exists, so running it again, or after a crash, finishes the job.
"""

from __future__ import annotations

import shutil
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from chaincode_client.fabric_network import configs
from chaincode_client.fabric_network.fabric_ca import CA, CAInstall, enroll, start_server
from chaincode_client.fabric_network.layout import (
    HOST,
    ORDERER_ADMIN_HOST,
    ORDERER_CA,
    ORDERER_DOMAIN,
    ORDERER_MSP,
    Layout,
    NetworkError,
    Orderer,
    Org,
)

CA_CERT = "ca.pem"  # the file name of the CA certificate in every MSP's cacerts/
TLS_CA_CERT = "tlsca.pem"
APP_USERS = (("Admin", "admin"), ("User1", "client"))

SecretFor = Callable[[str], str]  # orderer name -> its one-time enrollment secret


def tls_names(ip: str, *names: str) -> list[str]:
    """The names a TLS certificate of a node at `ip` carries: its host name and address (on
    the loopback network, `localhost` too)."""
    loopback = ["localhost"] if ip == HOST else []
    return list(dict.fromkeys([*names, ip, *loopback]))


def org_ca(layout: Layout, org: Org) -> CA:
    return CA(
        process=org.ca_name,
        ca_name=f"ca-org{org.index}",
        tls_ca_name=f"tlsca-org{org.index}",
        host=org.ip,
        port=org.ca_port,
        ops_port=org.ca_ops_port,
        tls_root=layout.ca_home(org.msp_id) / "ca-cert.pem",
        home=layout.ca_home(org.msp_id),
    )


def orderer_ca(layout: Layout, own: bool) -> CA:
    """The ordering organisation's CA: as its own host (orderer0) runs it, or (`own` False)
    as another orderer's host reaches it, trusting only its published certificate."""
    port, ops = layout.orderer_ca_ports
    home = layout.ca_home(ORDERER_ADMIN_HOST)
    return CA(
        process=ORDERER_CA,
        ca_name="ca-orderer",
        tls_ca_name="tlsca-orderer",
        host=layout.address_of(ORDERER_ADMIN_HOST),
        port=port,
        ops_port=ops,
        tls_root=(home / "ca-cert.pem")
        if own
        else layout.public_dir(ORDERER_MSP) / "msp" / "cacerts" / CA_CERT,
        home=home if own else None,
    )


def _ca_certs(ca: CA) -> tuple[Path, Path]:
    assert ca.home is not None
    return ca.home / "ca-cert.pem", ca.home / "tlsca" / "ca-cert.pem"


def _write_msp(msp: Path, cacert: Path, tlscacert: Path, cert: Path | None = None) -> None:
    """An MSP folder: CA and TLS CA certificates, NodeOUs; with `cert`, an identity's."""
    for sub, src, name in (("cacerts", cacert, CA_CERT), ("tlscacerts", tlscacert, TLS_CA_CERT)):
        (msp / sub).mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, msp / sub / name)
    configs.write_yaml(msp / "config.yaml", configs.nodeous_config(CA_CERT))
    if cert is not None:
        (msp / "signcerts").mkdir(exist_ok=True)
        cert.replace(msp / "signcerts" / "cert.pem")


def _identity(
    install: CAInstall,
    ca: CA,
    name: str,
    secret: str,
    folder: Path,
    tls: tuple[str, list[str]],
    cacert: Path,
    tlscacert: Path,
) -> None:
    """`folder/msp` and `folder/tls` of identity `name` (both enrolled here, keys made here).
    `tls` is (file stem: server or client, the names the TLS certificate carries)."""
    if (folder / "msp" / "signcerts" / "cert.pem").is_file():
        return
    stem, hosts = tls
    pair = enroll(install, ca, ca.tls_ca_name, name, secret, folder / "tls.tmp", hosts)
    (folder / "tls").mkdir(parents=True, exist_ok=True)
    pair.key.replace(folder / "tls" / f"{stem}.key")
    pair.cert.replace(folder / "tls" / f"{stem}.crt")
    shutil.copyfile(tlscacert, folder / "tls" / "ca.crt")
    shutil.rmtree(folder / "tls.tmp", ignore_errors=True)
    pair = enroll(install, ca, ca.ca_name, name, secret, folder / "msp.tmp")
    msp = folder / "msp"
    (msp / "keystore").mkdir(parents=True, exist_ok=True)
    pair.key.replace(msp / "keystore" / "key_sk")
    _write_msp(msp, cacert, tlscacert, pair.cert)
    shutil.rmtree(folder / "msp.tmp", ignore_errors=True)


def in_parallel(jobs: Sequence[Callable[[], list[str]]]) -> list[str]:
    """Run each job (a few `fabric-ca-client` processes) side by side; what they made."""
    if not jobs:
        return []
    with ThreadPoolExecutor(max_workers=len(jobs)) as pool:
        return [name for made in pool.map(lambda job: job(), jobs) for name in made]


def _enrolled(folder: Path) -> bool:
    return (folder / "msp" / "signcerts" / "cert.pem").is_file()


def org_identities(org: Org) -> list[tuple[str, str]]:
    """(name, NodeOU type) of everything an organisation's CA issues at bring-up."""
    users = [(f"{user}@{org.domain}", role) for user, role in APP_USERS]
    return [(org.peer_host, "peer"), *users, (ccaas_identity(org), "client")]


def ccaas_identity(org: Org) -> str:
    return f"{org.ccaas_name}.{org.domain}"


def init_org(install: CAInstall, layout: Layout, org: Org) -> list[str]:
    """Organisation `org`'s CA, identities and public MSP, on its own host. Returns what was
    made (empty when everything was there)."""
    ca = org_ca(layout, org)
    started = start_server(
        install, layout, ca, (f"ca.{org.domain}", f"tlsca.{org.domain}"),
        tls_names(org.ip, f"ca.{org.domain}"), org_identities(org),
    )  # fmt: skip
    cacert, tlscacert = _ca_certs(ca)
    org_dir = layout.org_dir(org)
    if not (org_dir / "msp" / "config.yaml").is_file():
        _write_msp(org_dir / "msp", cacert, tlscacert)

    def identity(name: str, folder: Path, tls: tuple[str, list[str]]) -> Callable[[], list[str]]:
        def job() -> list[str]:
            secret = ca.secret_for(name)
            _identity(install, ca, name, secret, folder, tls, cacert, tlscacert)
            return [name]

        return job

    jobs = []
    peer = layout.peer_dir(org)
    if not _enrolled(peer):
        jobs.append(identity(org.peer_host, peer, ("server", tls_names(org.ip, org.peer_host))))
    for user, _ in APP_USERS:
        folder, name = layout.user_dir(org, user), f"{user}@{org.domain}"
        if not _enrolled(folder):
            jobs.append(identity(name, folder, ("client", [name])))
    ccaas = layout.ccaas_tls_dir(org)
    if not (ccaas / "cert.pem").is_file():

        def ccaas_job() -> list[str]:
            name = ccaas_identity(org)
            names = tls_names(org.ip, name)
            enroll(install, ca, ca.tls_ca_name, name, ca.secret_for(name), ccaas, names)
            return [name]

        jobs.append(ccaas_job)
    made = in_parallel(jobs)
    publish(layout, org.msp_id, org_dir / "msp")
    return ([f"started {org.ca_name}"] if started else []) + made


def init_orderer_org(install: CAInstall, layout: Layout) -> list[str]:
    """The ordering organisation's CA and admin, on orderer0's host; registers each orderer."""
    ca = orderer_ca(layout, own=True)
    admin_name = f"Admin@{ORDERER_DOMAIN}"
    started = start_server(
        install, layout, ca, (f"ca.{ORDERER_DOMAIN}", f"tlsca.{ORDERER_DOMAIN}"),
        tls_names(ca.host, f"ca.{ORDERER_DOMAIN}"),
        [(admin_name, "admin"), *((o.host, "orderer") for o in layout.orderers)],
    )  # fmt: skip
    made = [f"started {ORDERER_CA}"] if started else []
    cacert, tlscacert = _ca_certs(ca)
    org_dir = layout.orderer_org_dir()
    if not (org_dir / "msp" / "config.yaml").is_file():
        _write_msp(org_dir / "msp", cacert, tlscacert)
    publish(layout, ORDERER_MSP, org_dir / "msp")
    admin = org_dir / "users" / admin_name
    if not _enrolled(admin):
        secret = ca.secret_for(admin_name)
        _identity(
            install, ca, admin_name, secret, admin, ("client", [admin_name]), cacert, tlscacert
        )
        made.append(admin_name)
    return made


def orderer_secret(layout: Layout, orderer: Orderer) -> str:
    """The one-time enrollment secret the ordering org's admin registered for `orderer` (read
    on orderer0's host; the admin hands it to that orderer's operator)."""
    ca = orderer_ca(layout, own=True)
    if orderer.host not in ca.registered():
        raise NetworkError(
            f"{orderer.name} is not registered with the ordering organisation's CA here "
            f"({ca.home}): run `org init {ORDERER_ADMIN_HOST}` on its host first"
        )
    return ca.secret_for(orderer.host)


def init_orderer(install: CAInstall, layout: Layout, orderer: Orderer, secret: str) -> list[str]:
    """Orderer `orderer`'s MSP and TLS pair, enrolled from its own host with `secret`, trusting
    the ordering org's published CA certificate; publishes its TLS certificate."""
    folder = layout.orderer_dir(orderer)
    if (folder / "msp" / "signcerts" / "cert.pem").is_file():
        return []
    msp_public = layout.public_dir(ORDERER_MSP) / "msp"
    cacert, tlscacert = msp_public / "cacerts" / CA_CERT, msp_public / "tlscacerts" / TLS_CA_CERT
    if not cacert.is_file():
        raise NetworkError(
            f"{orderer.name}: the ordering organisation's public MSP is not at {msp_public}; "
            "copy it from orderer0's host (public/OrdererMSP) first"
        )
    ca = orderer_ca(layout, own=orderer.name == ORDERER_ADMIN_HOST)
    names = tls_names(orderer.ip, orderer.host)
    _identity(install, ca, orderer.host, secret, folder, ("server", names), cacert, tlscacert)
    target = layout.consenter_cert(orderer)
    target.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(folder / "tls" / "server.crt", target)
    return [orderer.host]


def publish(layout: Layout, name: str, msp: Path) -> None:
    """Copy an organisation's MSP (certificates and NodeOUs only) to `public/<name>/msp`."""
    target = layout.public_dir(name) / "msp"
    for sub in ("cacerts", "tlscacerts"):
        (target / sub).mkdir(parents=True, exist_ok=True)
        for cert in (msp / sub).glob("*.pem"):
            shutil.copyfile(cert, target / sub / cert.name)
    shutil.copyfile(msp / "config.yaml", target / "config.yaml")
