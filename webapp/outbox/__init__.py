"""The ledger outbox: changes that must reach the ledger, relayed with retries."""
