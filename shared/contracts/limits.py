"""What Firestore and Pub/Sub can hold, in one place, checked before anything is written or published.

Sources (documented limits, not guesses):
- Firestore, "Usage and limits": a document is at most 1 MiB; a document id at most 1,500
  bytes and not ``__.*__``; a field name at most 1,500 bytes, never ``__.*__``; maps and arrays
  nest at most 20 levels; an array cannot hold an array; integers are 64-bit.
- Pub/Sub, "Quotas and limits": at most 100 attributes per message, a key at most 256 bytes,
  a value at most 1,024 bytes, an ordering key at most 1,024 bytes.

A provider's data is stored one level down (``resourceSpecific.x`` is depth 2 of the resource
document), so what a provider may send nests less deep than Firestore allows. Every check is
iterative: an event nested a thousand levels deep is refused without recursion.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterator

from .diff import escape

# Firestore
FIRESTORE_MAX_DOCUMENT_BYTES = 1_048_576
FIRESTORE_MAX_DOCUMENT_ID_BYTES = 1_500
FIRESTORE_MAX_FIELD_NAME_BYTES = 1_500
FIRESTORE_MAX_DEPTH = 20
RESERVED_NAME = re.compile(r"^__.*__$")
INT64 = (-(2 ** 63), 2 ** 63 - 1)
# Pub/Sub
PUBSUB_MAX_ATTRIBUTES = 100
PUBSUB_MAX_ATTRIBUTE_KEY_BYTES = 256
PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES = 1_024
PUBSUB_MAX_ORDERING_KEY_BYTES = 1_024
TRACE_CONTEXT_ATTRIBUTES = 2  # traceparent, tracestate: added to every message where it is published
# Ours
MAX_DATA_DEPTH = 16  # provider data below the resource document: 16 + its own levels < 20
MAX_EVENT_BYTES = 64 * 1024  # a provider message, the default limit (the CloudEvents and CNE specs' 64 KB)
MAX_EVENT_DEPTH = 32  # a whole event as JSON, before anything looks into it
DOCUMENT_HEADROOM_BYTES = 16_384  # what upsert adds around the provider's data (keys, times, history)


@dataclass(frozen=True)
class Breach:
    """One thing a store or a bus cannot hold: where (a JSON pointer), which rule, what."""

    path: str
    rule: str
    message: str



def _walk(value: Any, prefix: str) -> Iterator[tuple[str, Any, int, Any]]:
    """(pointer, value, depth, parent) for every node, depth-first, without recursion."""
    stack = [(prefix, value, 0, None)]
    while stack:
        path, node, depth, parent = stack.pop()
        yield path, node, depth, parent
        if isinstance(node, dict):
            stack.extend((f"{path}/{escape(k)}", v, depth + 1, node) for k, v in node.items())
        elif isinstance(node, list):
            stack.extend((f"{path}/{i}", v, depth + 1, node) for i, v in enumerate(node))


def _depth_within(value: Any, limit: int) -> bool:
    """Whether every node of ``value`` is at most ``limit`` levels down: the fast check, no paths built."""
    stack = [(value, 0)]
    pop, push = stack.pop, stack.append
    while stack:
        node, depth = pop()
        children = node.values() if type(node) is dict else node if type(node) is list else ()
        if not children:
            continue
        depth += 1
        if depth > limit:
            return False
        for child in children:
            if type(child) is dict or type(child) is list:
                push((child, depth))
    return True


def _storable_fast(value: Any, max_depth: int) -> bool:
    """True only if ``storable`` finds nothing (it may say False for what is fine: the slow walk decides).
    The common case, valid data, without building a path per node."""
    low, high = INT64
    if type(value) is int:
        return low <= value <= high
    stack = [(value, 0)]
    while stack:
        node, depth = stack.pop()
        if type(node) is dict:
            if node and depth + 1 > max_depth:
                return False
            for key, child in node.items():
                if (type(key) is not str or not key or (key[:2] == "__" and RESERVED_NAME.match(key))
                        or (len(key) * 4 > FIRESTORE_MAX_FIELD_NAME_BYTES
                            and len(key.encode()) > FIRESTORE_MAX_FIELD_NAME_BYTES)):
                    return False
                if type(child) is dict or type(child) is list:
                    stack.append((child, depth + 1))
                elif type(child) is int and not low <= child <= high:
                    return False
        elif type(node) is list:
            if node and depth + 1 > max_depth:
                return False
            for child in node:
                if type(child) is list:  # an array directly inside an array
                    return False
                if type(child) is dict:
                    stack.append((child, depth + 1))
                elif type(child) is int and not low <= child <= high:
                    return False
    return True


def too_deep(value: Any, limit: int, prefix: str = "") -> Breach | None:
    """The first place ``value`` nests deeper than ``limit`` levels, if any."""
    if _depth_within(value, limit):
        return None
    for path, node, depth, _ in _walk(value, prefix):
        if depth > limit:
            return Breach(path, "maxDepth", f"nested deeper than {limit} levels")
    return None


def storable(value: Any, prefix: str = "", max_depth: int = MAX_DATA_DEPTH) -> Breach | None:
    """The first reason Firestore could not store ``value`` (a provider's data), if any.

    Valid data, the common case, takes the fast check; only a breach walks again to say where."""
    if _storable_fast(value, max_depth):
        return None
    for path, node, depth, parent in _walk(value, prefix):
        if depth > max_depth:
            return Breach(path, "maxDepth", f"nested deeper than {max_depth} levels (Firestore stores 20)")
        if isinstance(node, dict):
            for key in node:
                name = str(key)
                if not name:
                    return Breach(f"{path}/", "propertyNames", "an empty field name cannot be stored")
                if RESERVED_NAME.match(name):
                    return Breach(f"{path}/{escape(name)}", "propertyNames",
                                  f"field name {name[:40]!r} is reserved by Firestore (__name__)")
                if len(name.encode()) > FIRESTORE_MAX_FIELD_NAME_BYTES:
                    return Breach(f"{path}/{escape(name[:40])}...", "propertyNames",
                                  f"a field name is at most {FIRESTORE_MAX_FIELD_NAME_BYTES} bytes")
        elif isinstance(node, list) and isinstance(parent, list):
            return Breach(path, "items", "an array directly inside an array cannot be stored")
        elif isinstance(node, int) and not isinstance(node, bool) and not INT64[0] <= node <= INT64[1]:
            return Breach(path, "maximum", "an integer beyond 64 bits cannot be stored")
    return None


def attribute_breach(key: str, value: str) -> str | None:
    """Why Pub/Sub would refuse the attribute ``key``=``value`` (InvalidArgument, which no retry fixes), or None.
    Pub/Sub also refuses keys starting ``goog``."""
    if not key:
        return "an empty attribute key"
    if len(key.encode()) > PUBSUB_MAX_ATTRIBUTE_KEY_BYTES:
        return (f"an attribute key of {len(key.encode())} bytes (Pub/Sub carries at most "
                f"{PUBSUB_MAX_ATTRIBUTE_KEY_BYTES})")
    if key.lower().startswith("goog"):
        return f"attribute key {key[:40]!r}: Pub/Sub reserves the goog prefix"
    if len(value.encode()) > PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES:
        return (f"attribute {key[:40]!r} of {len(value.encode())} bytes (Pub/Sub carries at most "
                f"{PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES})")
    return None


def attribute_breaches(attributes: dict[str, str] | Any) -> dict[str, str]:
    """Each attribute Pub/Sub would refuse, with why (``attribute_breach``); the count is ``attributes_fit``'s."""
    return {k: why for k, v in attributes.items() if (why := attribute_breach(k, str(v)))}


def attributes_fit(count: int) -> bool:
    """Whether ``count`` attributes still fit Pub/Sub's 100 once the trace context joins them at publish."""
    return count + TRACE_CONTEXT_ATTRIBUTES <= PUBSUB_MAX_ATTRIBUTES


def document_id_fits(doc_id: str) -> bool:
    return len(doc_id.encode()) <= FIRESTORE_MAX_DOCUMENT_ID_BYTES and not RESERVED_NAME.match(doc_id)


def document_fits(size: int) -> bool:
    """Whether data of ``size`` serialised bytes still fits a document with what upsert adds."""
    return size + DOCUMENT_HEADROOM_BYTES <= FIRESTORE_MAX_DOCUMENT_BYTES
