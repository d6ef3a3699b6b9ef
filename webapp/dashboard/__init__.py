"""Live dashboards: fleet, cost, utilisation, attestation and ledger activity."""
