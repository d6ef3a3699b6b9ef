"""The production processes, and no demo code: the ASGI server (gunicorn, two ASGI
workers), the lease worker, the ledger relay and the attestation watch, on a private
PostgreSQL and Redis, with a real node agent on a swtpm. A tenant requests a lease through
the API and sees it placed, active on the ledger, ended and settled."""

from __future__ import annotations

import json

from ledger.audit.receipt import verify_receipt
from tests.ledger.helpers import org_roots
from tests.webapp.production import deployment

LEASE_HOUR_S = "1000"  # the lease below (0.01 h) runs for 10 s of wall time


def test_a_lease_runs_its_whole_life_on_the_production_processes(tmp_path, tpm, ca):
    with deployment(tmp_path, tpm, ca, LEASE_HOUR_S=LEASE_HOUR_S) as deployed:
        api = deployed.api
        status, lease = api.call(
            "POST", "/api/v1/leases/", {"gpu_count": 2, "precision": "FP16", "hours": "0.01"}
        )
        assert status == 201, lease
        path = f"/api/v1/leases/{lease['id']}/"

        def state_is(*wanted: str):
            status, body = api.call("GET", path)
            return body if status == 200 and body["state"] in wanted else None

        placed = deployed.wait_for("placement", lambda: state_is("placed", "active"))
        assert len(placed["gpus"]) == 2 and placed["price_total_micro"] > 0
        active = deployed.wait_for("activation on the ledger", lambda: state_is("active"))
        assert active["started"]
        # checked against each organisation's CA, as an auditor gets them (not from the receipt)
        roots = org_roots(tmp_path / "ledger.sqlite3")  # the deployment's LEDGER_PATH
        status, receipt = api.call("GET", f"{path}receipt/")
        assert status == 200 and verify_receipt(receipt, roots) == []
        settled = deployed.wait_for("expiry and settlement", lambda: state_is("settled"))
        assert settled["ended"] and len(settled["settlements"]) == 1

        def settlement_on_ledger():
            body = state_is("settled")
            return body if body and body["settlements"][0]["ledger_tx"] else None

        deployed.wait_for("the settlement on the ledger", settlement_on_ledger)
        status, receipt = api.call("GET", f"{path}receipt/")
        assert status == 200 and verify_receipt(receipt, roots) == []
        recorded = json.dumps(receipt)
        assert all(f in recorded for f in ("CreateLease", "EndLease", "Settle"))
        assert deployed.processes["server"].poll() is None  # nothing crashed on the way
        assert "no drift" in deployed.manage("reconcile").stdout
