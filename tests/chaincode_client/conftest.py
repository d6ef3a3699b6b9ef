"""The contract suite's backends (embedded, embedded with peer processes, Fabric) for the
client's own tests: `ledger_env` runs a test once per backend."""

from tests.ledger.conftest import ledger_env  # noqa: F401  (a fixture, used by name)
