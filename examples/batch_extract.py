"""Batch extraction at scale: a JSONL of documents through vLLM with llama.cpp's grammar semantics, one schema for all.

Each input line is ``{"id": ..., "text": ...}``; each output line is ``{"id", "data", "valid", "finish_reason"}``,
``data`` the JSON the model wrote (constrained to the schema as llama-server would constrain it), ``valid`` whether it
also satisfies the keywords a grammar cannot enforce (``constrained.validate``). vLLM batches the requests itself
(continuous batching); this script feeds it ``--batch`` documents at a time and reports progress.

Run (the scale venv has vLLM; ``make setup-vllm``):

    .venv-vllm/bin/python examples/batch_extract.py --input docs.jsonl --schema person.json --output out.jsonl \
        [--model DIR] [--tensor-parallel-size N]

Without ``--input`` it runs on a few built-in documents. ``--model`` defaults to the SmolLM2-135M conversion the
tests build (``.venv-vllm/bin/python -m tests.scale.models``). On GPUs pass ``--tensor-parallel-size`` (one model split
over N GPUs); for many nodes, see the README ("Scale out with vLLM").
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

SCHEMA = {"type": "object", "properties": {"name": {"type": "string", "maxLength": 30},
                                           "age": {"type": "integer", "minimum": 0, "maximum": 130},
                                           "city": {"type": "string", "maxLength": 30}},
          "required": ["name", "age", "city"], "additionalProperties": False}
DOCS = [{"id": 1, "text": "Marta Kowalski, 34, lives in Lisbon."},
        {"id": 2, "text": "Tom Baker is a 52-year-old carpenter from Leeds."},
        {"id": 3, "text": "Aiko, aged 27, moved to Osaka last year."}]
PROMPT = ('Extract the person as JSON.\nText: Ann Lee, 40, lives in Oslo.\n'
          'JSON: {{"name": "Ann Lee", "age": 40, "city": "Oslo"}}\nText: {text}\nJSON: ')


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    with open(path, encoding="utf-8") as f:
        for n, line in enumerate(f, 1):
            if line.strip():
                doc = json.loads(line)
                if "text" not in doc:
                    raise SystemExit(f"{path}:{n}: a document needs a 'text' field")
                yield doc


def extract(llm: Any, docs: Iterable[dict[str, Any]], schema: Any, *, batch: int = 256, max_tokens: int = 128,
            prompt: str = PROMPT, progress: Any = None) -> Iterator[dict[str, Any]]:
    """Run ``docs`` through ``llm`` (a ``vllm.LLM`` whose structured-output backend is ours) ``batch`` at a time;
    yields one record per document, in input order."""
    from vllm import SamplingParams
    from vllm.sampling_params import StructuredOutputsParams

    from constrained import validate

    params = SamplingParams(max_tokens=max_tokens, temperature=0.0,
                            structured_outputs=StructuredOutputsParams(json=schema))
    chunk: list[dict[str, Any]] = []
    done = 0

    def run(chunk: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
        outs = llm.generate([prompt.format(text=d["text"]) for d in chunk], params, use_tqdm=False)
        for d, o in zip(chunk, outs, strict=True):
            c = o.outputs[0]
            try:
                data = json.loads(c.text)
                valid = c.finish_reason == "stop" and not validate(data, schema)
            except ValueError:
                data, valid = None, False
            yield {"id": d.get("id"), "data": data, "valid": valid, "finish_reason": c.finish_reason}

    for d in docs:
        chunk.append(d)
        if len(chunk) >= batch:
            yield from run(chunk)
            done += len(chunk)
            chunk = []
            if progress:
                progress(done)
    if chunk:
        yield from run(chunk)
        done += len(chunk)
        if progress:
            progress(done)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--input", type=Path, help="JSONL of documents with a 'text' field (default: 3 examples)")
    ap.add_argument("--schema", type=Path, help="JSON schema file (default: a person)")
    ap.add_argument("--output", type=Path, help="JSONL to write (default: stdout)")
    ap.add_argument("--model", help="a Hugging Face model folder or name vLLM can load")
    ap.add_argument("--batch", type=int, default=256)
    ap.add_argument("--max-tokens", type=int, default=128)
    ap.add_argument("--tensor-parallel-size", type=int, default=1)
    a = ap.parse_args(argv)

    import constrained.integrations.vllm as cv

    cv.enable()                                  # before the engine starts: its processes inherit the switch
    from vllm import LLM

    model = a.model or str(Path.home() / ".cache" / "constrained-tests" / "smollm2-135m-hf")
    if a.model is None and not Path(model).exists():
        raise SystemExit("no --model and no converted SmolLM2 in the cache: run "
                         "`.venv-vllm/bin/python -m tests.scale.models` first")
    try:
        import torch

        gpu = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        gpu = False
    kw: dict[str, Any] = {} if gpu else dict(dtype="float32", enforce_eager=True, kv_cache_memory_bytes=512 << 20)
    llm = LLM(model=model, structured_outputs_config={"backend": "xgrammar"},
              tensor_parallel_size=a.tensor_parallel_size, max_model_len=1024, **kw)
    schema = json.loads(a.schema.read_text()) if a.schema else SCHEMA
    docs = list(read_jsonl(a.input)) if a.input else DOCS
    out = open(a.output, "w", encoding="utf-8") if a.output else sys.stdout
    t0 = time.monotonic()
    n_valid = 0

    def progress(done: int) -> None:
        rate = done / max(time.monotonic() - t0, 1e-9)
        print(f"[{done}/{len(docs)}] {rate:.1f} docs/s", file=sys.stderr, flush=True)

    try:
        for rec in extract(llm, docs, schema, batch=a.batch, max_tokens=a.max_tokens, progress=progress):
            n_valid += rec["valid"]
            out.write(json.dumps(rec, ensure_ascii=False) + "\n")
    finally:
        if out is not sys.stdout:
            out.close()
    print(f"{n_valid}/{len(docs)} valid in {time.monotonic() - t0:.1f} s", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
