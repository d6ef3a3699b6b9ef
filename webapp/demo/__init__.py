"""The one-command demo: seeding a fleet, simulated node agents, the loop that requests and
ends leases, and the history a fresh dashboard starts with. No other app imports it."""
