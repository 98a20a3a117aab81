"""``enforce="all"``, the conjunction of a schema: allOf, $ref, if/then/else on types, and each keyword read into one set of constraints (``_Merged``): the ``MergeMixin`` part of ``enforce._Enforcer``."""

from __future__ import annotations

from typing import Any

from ..errors import SchemaError
from .dialect import IGNORED_PREFIX
from .enforce_base import (
    ANNOTATIONS,
    HANDLED,
    TYPES,
    Sub,
    _bounds,
    _count,
    _frac,
    _json_equal,
    _Merged,
    _negatable,
)
from .regex import (
    Unsupported,
)

_NOT_ENFORCED = {
    "dependencies": "draft 7 dependencies: not merged (a schema or key list applied when a key is present)",
    "unevaluatedProperties": "depends on which keys the other keywords evaluated (annotations): not enforced",
    "unevaluatedItems": "depends on which items the other keywords evaluated (annotations): not enforced",
    "$dynamicRef": "resolved through the dynamic scope: not followed",
    "$recursiveRef": "resolved through the dynamic scope: not followed",
}
"""Keywords enforce='all' leaves out, with the reason reported."""


class MergeMixin:
    def resolve(self, ref: str, path: str, at: Any = None) -> Sub:
        """The target of ``$ref`` (written in the schema ``at``, found at ``path``) and its path: a JSON pointer into
        the document, or, where the document has ``$id``s or ``$anchor``s, a URI resolved against the base of ``at``
        (the embedded resources and anchors of this document, and the documents of ``resources``: remote ones are
        never fetched)."""
        ids = self.id_index()
        if ids is not None and at is not None:
            return self.resolve_uri(ref, path, at, ids)
        if ref == "#":
            return self.root, "#"
        if not ref.startswith("#/"):
            raise Unsupported(f"$ref {ref} is not a reference into this document")
        return self.pointer(self.root, "#", ref[1:], ref, path)

    def pointer(self, target: Any, base_path: str, frag: str, ref: str, path: str) -> Sub:
        from urllib.parse import unquote

        for raw in frag[1:].split("/") if frag else ():
            seg = unquote(raw.replace("~1", "/").replace("~0", "~"))
            if isinstance(target, dict) and seg in target:
                target = target[seg]
            elif isinstance(target, dict) and IGNORED_PREFIX + seg in target:
                target = target[IGNORED_PREFIX + seg]  # a keyword the dialect does not define, renamed
            elif isinstance(target, list) and seg.isdigit() and int(seg) < len(target):
                target = target[int(seg)]
            else:
                raise SchemaError(f"JSON schema error at {path}: cannot resolve $ref {ref}", path=path)
        return target, base_path + frag

    def id_index(self) -> tuple[dict[str, Sub], dict[int, str]] | None:
        """URI -> (schema, path) of every resource and anchor, and each schema's base URI; None when the document
        has no ``$id`` or ``$anchor`` and no resources were given (plain pointers then). Remote documents join the
        index as they are loaded (``load_remote``)."""
        if "_ids" in self.__dict__:
            return self._ids
        uris: dict[str, Sub] = {}
        own: dict[int, str] = {}
        found = self.index_document(self.root, "#", "", uris, own) or self.resources is not None
        self._ids = (uris, own) if found else None
        return self._ids

    def index_document(self, doc: Any, root_path: str, base: str, uris: dict[str, Sub], own: dict[int, str]) -> bool:
        """Add the resources and anchors of ``doc`` (at ``root_path``, retrieved as ``base``) to the index; whether
        it has any ``$id`` or ``$anchor``."""
        from urllib.parse import urldefrag, urljoin

        found = False
        stack: list[tuple[Any, str, str]] = [(doc, root_path, base)]
        while stack:
            node, p, base = stack.pop()
            if isinstance(node, list):
                stack.extend((v, f"{p}/{i}", base) for i, v in enumerate(node))
                continue
            if not isinstance(node, dict):
                continue
            if isinstance(node.get("$id"), str) and node["$id"].startswith("#") and len(node["$id"]) > 1:
                uris.setdefault(base + node["$id"], (node, p))  # a draft 7 anchor ("$id": "#foo")
                found = True
            elif isinstance(node.get("$id"), str) and not (self.ref_alone and "$ref" in node):
                base = urldefrag(urljoin(base, node["$id"]))[0]
                found = True
                uris.setdefault(base, (node, p))
            if p == root_path:
                uris.setdefault(base, (node, p))
            if isinstance(node.get("$anchor"), str):
                uris.setdefault(f"{base}#{node['$anchor']}", (node, p))
                found = True
            own[id(node)] = base
            for k, v in node.items():
                if k not in ("const", "enum", "default", "examples"):
                    stack.append((v, f"{p}/{k}", base))
        return found

    def load_remote(self, uri: str, ref: str, ids: tuple) -> None:
        """Read the document ``uri`` from the resources given (never the network) into the index, normalised with
        the referring schema's dialect (as jsonschema reads it); ``Unsupported`` when there is none."""
        from .dialect import dialect_of, normalized

        if uri in self.remote:
            return
        doc = self.lookup(uri) if uri else None
        if doc is None:
            where = "in the resources given" if self.resources is not None else "in this document"
            raise Unsupported(f"$ref {ref}: {uri or ref} is not a resource {where} (remote references are not "
                              f"fetched: pass resources= to resolve them)")
        if not isinstance(doc, (dict, bool)):
            raise Unsupported(f"$ref {ref}: the resource {uri} is not a schema")
        if isinstance(doc, dict) and "$schema" in doc and dialect_of(doc) != self.dialect:
            raise Unsupported(f"$ref {ref}: the resource {uri} declares dialect {dialect_of(doc)}, this schema "
                              f"{self.dialect} (not followed across dialects)")
        norm = normalized(doc, self.dialect)
        self.remote[uri] = norm  # kept alive: memo keys are ids
        uris, own = ids
        self.index_document(norm, f"{uri}#", uri, uris, own)
        uris.setdefault(uri, (norm, f"{uri}#"))

    def resolve_uri(self, ref: str, path: str, at: Any, ids: tuple) -> Sub:
        from urllib.parse import urldefrag, urljoin

        uris, own = ids
        base = own.get(id(at), "")
        # a fragment-only reference stays in the base resource (urljoin ignores bases such as urn:uuid:...)
        uri, frag = urldefrag(base + ref if ref.startswith("#") else urljoin(base, ref))
        if uri not in uris:
            self.load_remote(uri, ref, ids)
        if frag and not frag.startswith("/"):
            if f"{uri}#{frag}" in uris:
                return uris[f"{uri}#{frag}"]
            raise Unsupported(f"$ref {ref}: no $anchor {frag} in {'this document' if uri not in self.remote else uri}")
        doc, doc_path = uris[uri]
        return self.pointer(doc, doc_path, frag, ref, path)

    def flatten(self, subs: list[Sub]) -> list[Sub]:
        """The conjunction: allOf members and $ref targets inlined (each schema once). Memoised per (schema,
        path) sequence (a schema with many alternatives flattens the same conjunctions thousands of times); the
        entry holds the schemas, so their ids stay theirs."""
        key = tuple((id(s), p) for s, p in subs)
        memo = self.__dict__.setdefault("_flat", {})
        hit = memo.get(key)
        if hit is not None:
            return list(hit[1])
        out = self.flatten_uncached(subs)
        memo[key] = (tuple(subs), tuple(out))
        return out

    def flatten_uncached(self, subs: list[Sub]) -> list[Sub]:
        """:meth:`flatten` without the memo."""
        out: list[Sub] = []
        seen: set[int] = set()
        stack = list(reversed(subs))
        while stack:
            s, p = stack.pop()
            if id(s) in seen:
                continue
            seen.add(id(s))
            if isinstance(s, dict) and self.ref_alone and isinstance(s.get("$ref"), str):
                try:
                    stack.append(self.resolve(s["$ref"], p, s))
                except Unsupported as e:
                    self.unenforced(p, "$ref", str(e))
                continue
            out.append((s, p))
            if not isinstance(s, dict):
                continue
            more: list[Sub] = []
            if "$ref" in s and isinstance(s["$ref"], str):
                try:
                    more.append(self.resolve(s["$ref"], p, s))
                except Unsupported as e:
                    self.unenforced(p, "$ref", str(e))
            if isinstance(s.get("allOf"), list):
                more += [(m, f"{p}/allOf/{i}") for i, m in enumerate(s["allOf"])]
            stack.extend(reversed(more))
        if len(out) > 2000:
            raise SchemaError(f"JSON schema error at {subs[0][1]}: allOf/$ref expand to more than 2000 schemas",
                              path=subs[0][1])
        return out

    def merge(self, subs: list[Sub]) -> _Merged:
        m = _Merged(subs=subs)
        for s, p in self.flatten(subs):
            if s is True or s == {}:
                continue
            if s is False:
                m.empty = True
                continue
            if not isinstance(s, dict):
                raise SchemaError(f"JSON schema error at {p}: schema must be an object or a boolean", path=p)
            self.merge_one(m, s, p)
        return m

    def merge_one(self, m: _Merged, s: dict, p: str) -> None:  # noqa: C901 - one keyword per branch
        for kw in s:
            if kw not in HANDLED and kw not in ANNOTATIONS and not kw.startswith("x-"):
                from .nodes import KEYWORDS

                if kw in KEYWORDS or kw in _NOT_ENFORCED:
                    self.unenforced(p, kw, _NOT_ENFORCED.get(kw, "not supported by enforce='all'"))
        t = s.get("type")
        if t is not None:
            names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) and all(
                isinstance(x, str) for x in t) else None
            if names is None or not names <= set(TYPES):
                raise SchemaError(f"JSON schema error at {p}: type must be a type name or a list of them", path=p)
            if "number" in names:
                names.add("integer")
            m.types = names if m.types is None else m.types & names
        for kw in ("const", "enum"):
            if kw in s:
                vals = [s["const"]] if kw == "const" else s["enum"]
                if not isinstance(vals, list):
                    raise SchemaError(f"JSON schema error at {p}: enum must be an array", path=p)
                if m.values is None:
                    m.values = list(vals)
                else:
                    m.values = [v for v in m.values if any(_json_equal(v, w) for w in vals)]
        for kw in ("anyOf", "oneOf"):
            if kw in s:
                alts = s[kw]
                if not isinstance(alts, list) or not alts:
                    raise SchemaError(f"JSON schema error at {p}/{kw}: must be a non-empty array of schemas",
                                      path=f"{p}/{kw}")
                m.anyofs.append(([(a, f"{p}/{kw}/{i}") for i, a in enumerate(alts)], kw, p))
        if "not" in s:
            m.nots.append((s["not"], f"{p}/not"))
        if "if" in s:
            self.merge_if(m, s, p)
        self.merge_number(m, s, p)
        if "pattern" in s:
            m.patterns.append((s["pattern"], p))
        if "format" in s and isinstance(s["format"], str):
            m.formats.append((s["format"], p))
        m.min_len, m.max_len = _bounds(s, "minLength", "maxLength", p, m.min_len, m.max_len)
        self.merge_array(m, s, p)
        self.merge_object(m, s, p)

    def merge_if(self, m: _Merged, s: dict, p: str) -> None:
        cond = s["if"]
        if cond is True or cond == {}:
            if "then" in s:
                m.anyofs.append(([(s["then"], f"{p}/then")], "then", p))
            return
        if cond is False:
            if "else" in s:
                m.anyofs.append(([(s["else"], f"{p}/else")], "else", p))
            return
        if isinstance(cond, dict) and set(cond) - ANNOTATIONS == {"type"}:
            t = cond["type"]
            names = {t} if isinstance(t, str) else set(t) if isinstance(t, list) else set()
            if "number" in names:
                names.add("integer")
            if "integer" in names and "number" not in names:
                self.unenforced(p, "if", "an if on integer alone is not split (integer vs number)")
                return
            yes: dict = {"type": sorted(names)}
            no: dict = {"type": sorted(set(TYPES) - names)}
            then = self.made(("if-type", id(s)), lambda: [({"allOf": [yes, s.get("then", True)]}, f"{p}/then"),
                                                          ({"allOf": [no, s.get("else", True)]}, f"{p}/else")])
            m.anyofs.append((then, "if", p))
            return
        if isinstance(cond, dict) and set(cond) - ANNOTATIONS in ({"const"}, {"enum"}) and _negatable(cond):
            # scalar values: (if and then) or (not if and else), the negation as a not of those values
            then = self.made(("if-values", id(s)), lambda: [
                ({"allOf": [cond, s.get("then", True)]}, f"{p}/then"),
                ({"allOf": [{"not": cond}, s.get("else", True)]}, f"{p}/else")])
            m.anyofs.append((then, "if", p))
            return
        groups = self.not_groups(cond)
        if groups is not None and ("then" in s or "else" in s):
            # a condition on property presence / property values (or an anyOf of such): (if and then) or (not if
            # and else), where "not if" is an object missing a required key, or holding a property that fails its
            # (negatable) schema, for each condition of the anyOf
            def build() -> list:
                yes = ({"allOf": [cond, s.get("then", True)]}, f"{p}/then")
                if any(not g for g in groups):
                    return [yes]  # the condition holds for every value
                return [yes, ({"allOf": [{"anyOf": g} for g in groups] + [s.get("else", True)]}, f"{p}/else")]
            m.anyofs.append((self.made(("if-struct", id(s)), build), "if", p))
            return
        if "then" in s or "else" in s:
            self.unenforced(p, "if", "if/then/else is enforced only when 'if' names types, scalar values, "
                                     "required keys or properties with types/values")

    def structural_negation(self, cond: dict) -> list | None:
        """The alternatives of ``not cond`` for a condition made of ``required``, ``properties`` whose schemas are
        negatable (types, scalar values) and ``type: object``; None for any other condition."""
        keys = set(cond) - ANNOTATIONS
        if not keys or not keys <= {"required", "properties", "type"}:
            return None
        if "type" in cond and cond["type"] != "object":
            return None
        req = cond.get("required", [])
        props = cond.get("properties", {})
        if not isinstance(req, list) or not all(isinstance(k, str) for k in req) or not isinstance(props, dict):
            return None
        if not all(_negatable(v) for v in props.values()):
            return None
        negs: list = [{"type": "object", "properties": {k: False}} for k in req]
        for k, v in props.items():
            if v is True or v == {}:
                continue
            negs.append({"type": "object", "required": [k], "properties": {k: {"not": v}}})
        if "type" in cond:
            negs.append({"not": {"type": "object"}})
        return negs

    def merge_number(self, m: _Merged, s: dict, p: str) -> None:
        for kw, lower, excl in (("minimum", True, False), ("exclusiveMinimum", True, True),
                                ("maximum", False, False), ("exclusiveMaximum", False, True)):
            if kw not in s:
                continue
            v = s[kw]
            if isinstance(v, bool) or not isinstance(v, (int, float)):
                if isinstance(v, bool) and kw.startswith("exclusive"):
                    self.unenforced(p, kw, "draft-4 boolean exclusive bounds are not supported")
                    continue
                raise SchemaError(f"JSON schema error at {p}: {kw} must be a number", path=p)
            b = (_frac(v), excl)
            if lower:
                if m.lo is None or b[0] > m.lo[0] or (b[0] == m.lo[0] and excl):
                    m.lo = b
            elif m.hi is None or b[0] < m.hi[0] or (b[0] == m.hi[0] and excl):
                m.hi = b
        if "multipleOf" in s:
            v = s["multipleOf"]
            if isinstance(v, bool) or not isinstance(v, (int, float)) or v <= 0:
                raise SchemaError(f"JSON schema error at {p}: multipleOf must be a positive number", path=p)
            m.multiples.append(_frac(v))

    def merge_array(self, m: _Merged, s: dict, p: str) -> None:
        items = s.get("items")
        prefix = s.get("prefixItems")
        tup: list | None = prefix if isinstance(prefix, list) else items if isinstance(items, list) else None
        tkey = "prefixItems" if isinstance(prefix, list) else "items"
        if tup is not None:
            for i, it in enumerate(tup):
                while len(m.prefix) <= i:
                    m.prefix.append([])
                m.prefix[i].append((it, f"{p}/{tkey}/{i}"))
            after = s.get("additionalItems") if tkey == "items" else items
            if after is not None:
                m.rest.append((after, f"{p}/{'additionalItems' if tkey == 'items' else 'items'}"))
                m.rest_after.append(len(tup))
            else:
                m.rest_after.append(-1)  # a tuple without a rest schema: nothing more to say
        elif items is not None:
            m.rest.append((items, f"{p}/items"))
            m.rest_after.append(0)
        m.min_items, m.max_items = _bounds(s, "minItems", "maxItems", p, m.min_items, m.max_items)
        if "contains" in s:
            lo = _count(s, "minContains", p) if "minContains" in s else 1
            hi = _count(s, "maxContains", p) if "maxContains" in s else None
            m.contains.append(((s["contains"], f"{p}/contains"), lo, hi))
        if s.get("uniqueItems") is True:
            m.unique = True

    def merge_object(self, m: _Merged, s: dict, p: str) -> None:
        props = s.get("properties")
        pats = s.get("patternProperties")
        add = s.get("additionalProperties")
        if props is not None and not isinstance(props, dict):
            raise SchemaError(f"JSON schema error at {p}: properties must be an object", path=p)
        if props or pats or add is not None:
            m.members.append({"props": {k: (v, f"{p}/properties/{k}") for k, v in (props or {}).items()},
                              "patterns": [(k, v, f"{p}/patternProperties/{k}") for k, v in (pats or {}).items()],
                              "additional": None if add is None else (add, f"{p}/additionalProperties")})
            for k in props or {}:
                if k not in m.prop_order:
                    m.prop_order.append(k)
        req = s.get("required")
        if isinstance(req, list):
            for k in req:
                if isinstance(k, str) and k not in m.required:
                    m.required.append(k)
        m.min_props, m.max_props = _bounds(s, "minProperties", "maxProperties", p, m.min_props, m.max_props)
        if "propertyNames" in s:
            m.names.append((s["propertyNames"], f"{p}/propertyNames"))
        ds = s.get("dependentSchemas")
        if isinstance(ds, dict):
            # (key absent) or (key present and its schema): two disjoint branches per key
            for k, sub in ds.items():
                if sub is True or sub == {}:
                    continue
                where = f"{p}/dependentSchemas/{k}"
                alts = self.made(("dependent", id(s), k), lambda k=k, sub=sub, where=where: [
                    ({"properties": {k: False}}, where), ({"required": [k], "allOf": [sub]}, where)])
                m.anyofs.append((alts, "dependentSchemas", p))
        dr = s.get("dependentRequired")
        if isinstance(dr, dict):
            for k, v in dr.items():
                m.dep_required.setdefault(k, [])
                m.dep_required[k] += [x for x in v if x not in m.dep_required[k]]
