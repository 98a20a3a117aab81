"""Tests of `sampler`."""
