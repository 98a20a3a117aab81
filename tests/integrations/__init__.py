"""Tests of `integrations`."""
