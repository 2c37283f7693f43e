"""Helpers shared by the test packages: tiny models, synthetic runs, gates, browser drivers."""
