"""The adversarial suite (issue 20, docs/threat-model.md): each test plays one attacker of
the threat model against the contract's public functions and asserts the refusal and its
reason code. The ledger fixtures are tests/ledger's, so every test runs once per backend
(the embedded engine, its peers in processes of their own, and Fabric where marked)."""

from __future__ import annotations

from tests.ledger.conftest import (  # noqa: F401  (fixtures, found by pytest by name)
    boot_policy,
    ledger_client,
    ledger_env,
    node_tpm,
)
