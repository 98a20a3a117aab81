"""Tests of `llama`."""
