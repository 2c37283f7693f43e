"""Fixtures of the recovery tests: a saved tiny parent run, and a fresh store holding a copy of it."""

from tests.helpers.recovery import parent_fixture, store_fixture  # noqa: F401 - the shared fixtures, found by pytest here
