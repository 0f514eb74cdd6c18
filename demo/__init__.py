"""The demo and test companion: the fake provider (a real HTTP server) and the demo's seed data."""
