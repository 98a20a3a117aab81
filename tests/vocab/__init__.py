"""Tests of `vocab`."""
