"""Offline resources for remote ``$ref``s: schema documents the caller supplies by URI, never fetched.

A schema may reference another document by URI (``"$ref": "https://json.schemastore.org/base.json#/definitions/x"``).
Nothing here touches the network: ``enforce="all"`` resolves such a reference only from ``resources``, a mapping
(or a function) from a URI without fragment to the schema document it names; a URI it does not hold stays a
reported ``$ref``. The same resources can be handed to jsonschema (``registry``), so that a validator reads the
reference exactly as the grammar does (jsonschema's default would fetch it over HTTP).

A remote document is read with the keywords of the referring schema's dialect, as jsonschema's validator does (it
descends into the target with the root's validator class); one that declares another ``$schema`` is not followed
(reported), since its identifiers would then be read by another draft's rules.

Example:
    >>> base = {"$defs": {"port": {"type": "integer", "minimum": 1, "maximum": 65535}}}
    >>> find = lookup_of({"https://example.com/base.json": base})
    >>> find("https://example.com/base.json") is base, find("https://example.com/other.json")
    (True, None)
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

Resources = Mapping[str, Any] | Callable[[str], Any]
"""A mapping URI -> schema document, or a function returning the document of a URI (None when it has none)."""


def lookup_of(resources: Resources | None) -> Callable[[str], Any]:
    """A function URI (without fragment) -> document or None, for a mapping, a function or no resources at all.

    >>> lookup_of(None)("https://example.com/a.json") is None
    True
    """
    if resources is None:
        return lambda _uri: None
    if callable(resources):
        return resources
    if isinstance(resources, Mapping):
        return resources.get
    raise TypeError(f"resources must be a mapping URI -> schema or a function, got {type(resources).__name__}")


def registry(resources: Resources | None, default_dialect_uri: str | None = None) -> Any:
    """A ``referencing.Registry`` serving ``resources`` (and nothing else: an unknown URI is ``NoSuchResource``,
    never a download), for ``jsonschema`` validators (``cls(schema, registry=registry(...))``).

    A document without ``$schema`` is read as ``default_dialect_uri`` (the referring schema's meta-schema URI;
    2020-12 when None).

    >>> reg = registry({"https://example.com/a.json": {"type": "string"}})
    >>> reg.get_or_retrieve("https://example.com/a.json").value.contents
    {'type': 'string'}
    """
    import referencing
    import referencing.exceptions
    import referencing.jsonschema

    find = lookup_of(resources)
    try:
        spec = referencing.jsonschema.specification_with(
            default_dialect_uri or "https://json-schema.org/draft/2020-12/schema")
    except referencing.exceptions.CannotDetermineSpecification:
        spec = referencing.jsonschema.DRAFT202012

    def retrieve(uri: str) -> Any:
        doc = find(uri)
        if doc is None:
            raise referencing.exceptions.NoSuchResource(ref=uri)
        return referencing.Resource.from_contents(doc, default_specification=spec)

    return referencing.Registry(retrieve=retrieve)  # type: ignore[call-arg]
