"""llama-server's own test suite (the sdist's ``tools/server/tests/unit/``), run unchanged against ``constrained
serve`` in a subprocess (``tests/server_suite/run_upstream.py``).

The suite starts a server per test, so the normal suite runs a fixed selection of the model-independent tests
(about 1-2 minutes); ``python -m tests.server_suite.run_upstream unit/<file>.py`` runs any file, and
``tests/server_suite/UPSTREAM.md`` lists the results of the whole selection with the reason for every test that does
not pass.
"""

from __future__ import annotations

import pytest

from tests.server_suite.run_upstream import run

# model-independent tests that must pass (file, -k expression)
SELECTION = [
    "unit/test_basic.py::test_server_start_simple",
    "unit/test_basic.py::test_server_props",
    "unit/test_basic.py::test_server_models",
    "unit/test_basic.py::test_server_model_aliases_and_tags",
    "unit/test_tokenize.py::test_tokenize_with_pieces",
    "unit/test_ignore_eos.py",
    "unit/test_security.py::test_access_public_endpoint",
    "unit/test_security.py::test_incorrect_api_key",
    "unit/test_chat_completion.py::test_completion_with_invalid_grammar",
    "unit/test_chat_completion.py::test_chat_completions_token_count",
    "unit/test_template.py::test_add_generation_prompt",          # a relative --chat-template-file, --jinja
    # Responses and /metrics (each passes on the real llama-server with the same model too)
    "unit/test_compat_oai_responses.py::test_responses_stream_with_llama_telemetry",
    "unit/test_metrics.py::test_metrics_prometheus_format",
    "unit/test_metrics.py::test_metrics_prompt_processed_and_cached",
    "unit/test_metrics.py::test_metrics_generation_rate_excludes_first_token",
    "unit/test_metrics.py::test_metrics_timings_on_prompt_progress",
    # Anthropic Messages (pass on the real llama-server with the same model too)
    "unit/test_compat_anthropic.py::test_anthropic_messages_basic",
    "unit/test_compat_anthropic.py::test_anthropic_messages_streaming",
    "unit/test_compat_anthropic.py::test_anthropic_count_tokens_with_system",
    "unit/test_compat_anthropic.py::test_anthropic_missing_messages",
    "unit/test_compat_anthropic.py::test_anthropic_stop_sequences",
]


@pytest.fixture(scope="module")
def outcomes() -> dict[str, str]:
    code, res, out = run(SELECTION, timeout=900)
    assert res, f"the upstream suite ran no test (exit {code}):\n{out[-4000:]}"
    return res


def test_upstream_selection_passes(outcomes: dict[str, str]) -> None:
    failed = sorted(k for k, v in outcomes.items() if v != "passed")
    assert not failed, failed
    assert len(outcomes) >= 10
