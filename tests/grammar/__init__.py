"""Tests of `grammar`."""
