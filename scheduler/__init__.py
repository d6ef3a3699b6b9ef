"""Generation catalogue, energy-attribution pricing, placement, telemetry sources and
settlement arithmetic. No Django."""
