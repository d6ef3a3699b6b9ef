"""`manage.py demo`: migrate, seed a mixed-generation fleet, print the logins, then serve
the site on 127.0.0.1:8000 while the demo loop leases, measures and settles."""

from __future__ import annotations

import errno
import os
import signal
import socket
import threading
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand, CommandError

from chaincode_client.fabric_network.layout import DEFAULT_BASE_PORT
from scheduler.grants.local_cluster import LocalClusterError
from webapp.demo.agents import STOP_SIGNALS, DemoAgents
from webapp.demo.cluster import DemoCluster
from webapp.demo.governance import admin_clients, approve_fleet_policies
from webapp.demo.history import seed_history
from webapp.demo.loop import DEMO_HOUR_S, DemoLoop
from webapp.demo.seed import OPERATOR, seed_demo
from webapp.fleet.models import Node, PcrPolicy
from webapp.outbox.ledger import use_local_fabric

DEMO_ATTESTATION_INTERVAL_S = 10.0
SHUTDOWN_GRACE_S = 3.0


def ensure_port_free(host: str, port: int) -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind((host, port))
        except OSError as exc:
            if exc.errno == errno.EADDRINUSE:
                raise CommandError(
                    f"port {port} on {host} is already in use; stop what is using it "
                    f"(ss -ltnp 'sport = :{port}') or run: manage.py demo --port OTHER"
                ) from None
            raise CommandError(f"cannot listen on {host}:{port}: {exc.strerror}") from None


class Command(BaseCommand):
    help = "Run the Wattlease demo: seeded fleet, live dashboard, background leasing loop."

    def add_arguments(self, parser):
        parser.add_argument("--host", default="127.0.0.1")
        parser.add_argument("--port", type=int, default=8000)
        parser.add_argument("--no-loop", action="store_true", help="serve without activity")
        parser.add_argument(
            "--ledger",
            choices=("embedded", "fabric"),
            default=settings.LEDGER_BACKEND,
            help="fabric: bring up a loopback Fabric network (3 orderers, 2 organisations) "
            "under the data folder and run the whole demo through it (default: LEDGER_BACKEND)",
        )
        parser.add_argument(
            "--cluster",
            choices=("slurm", "none"),
            default="slurm",
            help="slurm (default): run a small Slurm cluster for the demo's nodes (needs root "
            "and Debian's Slurm packages, which `make demo` installs) and grant every lease "
            "there; none: leases are recorded and billed but granted nowhere",
        )
        parser.add_argument(
            "--fabric-base-port",
            type=int,
            default=DEFAULT_BASE_PORT,
            help="first of the ports the Fabric network uses (base..base+133)",
        )

    def handle(
        self, *args, host: str, port: int, no_loop: bool, ledger: str, cluster: str, **options
    ):
        if settings.PRODUCTION:
            raise CommandError(
                "the demo seeds logins and keys and runs only in development: "
                "WATTLEASE_ENV=development manage.py demo (make demo sets it)"
            )
        ensure_port_free(host, port)
        network = None
        if ledger == "fabric":
            self.stdout.write("Bringing up the Fabric network (3 Raft orderers, 2 orgs)…")
            network = use_local_fabric(options["fabric_base_port"], log=self.stdout.write)
        settings.LEASE_HOUR_S = DEMO_HOUR_S  # the console's progress bars run on the demo clock
        call_command("migrate", interactive=False, verbosity=0)
        self.stdout.write("Seeding the demo fleet…")
        seeded = seed_demo()
        self.stdout.write("Seeding a week of telemetry history (first run only)…")
        seed_history()
        self.stdout.write(self.style.SUCCESS(f"Wattlease demo on http://{host}:{port}/"))
        if seeded.operator_password:
            self.stdout.write(
                f"  operator console: http://{host}:{port}/admin/  "
                f"user {OPERATOR}  password {seeded.operator_password}"
            )
        else:
            self.stdout.write(f"  operator console: user {OPERATOR} (password set on first run)")
        for tenant, (user, password) in seeded.tenant_logins.items():
            self.stdout.write(
                f"  tenant console for {tenant}: http://{host}:{port}/console/  "
                f"user {user}  password {password}"
            )
        for tenant, token in seeded.tenant_keys.items():
            self.stdout.write(f"  tenant API key for {tenant}: {token}")
        self.stdout.write(
            f"  try: curl -H 'Authorization: Bearer <key>' http://{host}:{port}/api/v1/leases/"
        )
        agents = DemoAgents(settings.DATA_DIR, f"http://{host}:{port}", DEMO_ATTESTATION_INTERVAL_S)
        self.stdout.write("Starting one swtpm and node agent per node…")
        nodes = list(Node.objects.order_by("name"))
        policy = PcrPolicy.objects.get(name="demo-boot-policy")
        agents.prepare(nodes, policy, progress=self.stdout.write)
        self.stdout.write("Both organisations' admins approve the EK roots and PCR policy…")
        with admin_clients(network) as admins:
            approve_fleet_policies(admins, policy)
        slurm = None
        if cluster == "slurm":
            self.stdout.write("Starting the Slurm cluster (munge, MariaDB, slurmdbd, slurmctld, "
                              "one slurmd per node)…")  # fmt: skip
            slurm = DemoCluster(settings.DATA_DIR, progress=self.stdout.write)
            try:
                slurm.start(nodes)
            except LocalClusterError as failed:
                agents.stop()
                raise CommandError(
                    f"{failed}\nor run the demo without a cluster: manage.py demo --cluster none"
                ) from None
        agents.launch(nodes)
        loop = None if no_loop else DemoLoop(cluster=slurm)
        if loop:
            loop.start()

        def stop_everything() -> None:
            if loop:
                loop.stop()
            agents.stop()  # agents finish their round while the server still answers
            if slurm is not None:
                slurm.stop()
            if network is not None:
                network.down()
            from twisted.internet import reactor

            reactor.callFromThread(reactor.stop)
            # daphne's reactor does not always stop with requests in flight; everything
            # worth keeping is committed and the swtpms are down, so leave regardless.
            time.sleep(SHUTDOWN_GRACE_S)
            os._exit(0)

        def shutdown(signum, frame):
            # the handler runs on the server's thread: do the work on another one, so the
            # server keeps answering the agents' last requests
            self.stdout.write("Stopping the demo: agents, swtpms, server…")
            threading.Thread(target=stop_everything, name="demo-shutdown").start()

        # installed before the reactor starts: Twisted keeps a SIGINT handler it finds, and
        # daphne's runserver is told not to install its own for SIGTERM
        for signum in STOP_SIGNALS:  # a closed terminal (SIGHUP) stops it as SIGTERM does
            signal.signal(signum, shutdown)
        call_command(
            "runserver",
            f"{host}:{port}",
            use_reloader=False,
            insecure_serving=True,
            skip_checks=True,
        )
        stop_everything()
