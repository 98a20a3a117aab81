"""Tests of `json_schema`."""
