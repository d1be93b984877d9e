"""The identities every contract shares: a resource's key, a CloudEvent's dedup
identity (per provider), one Pub/Sub message, and Pub/Sub's byte limits on what it carries."""

from __future__ import annotations

import enum
import hashlib
from dataclasses import dataclass
from typing import Mapping
from urllib.parse import quote, unquote

RESOURCE_KEY_SEPARATOR = "/"


class CommonStatus(enum.StrEnum):
    """The statuses every resource type has, the ones the platform itself sets and reads (each type's
    others are its schema's enum)."""

    DELETED = "DELETED"  # gone: its provider says so, or a complete snapshot of it no longer lists it
    UNKNOWN = "UNKNOWN"  # not known: a status outside the enum, or none reported within the deadline

# Pub/Sub limits an attribute value and an ordering key to 1,024 bytes (not characters).
MAX_ATTRIBUTE_BYTES = 1024
_ELLIPSIS = "..."


def clip(value: str, limit: int = MAX_ATTRIBUTE_BYTES) -> str:
    """``value`` cut to at most ``limit`` UTF-8 bytes on a character boundary ('...' marks a cut).

    The one helper for every attribute value and ordering key we publish.
    """
    encoded = value.encode()
    if len(encoded) <= limit:
        return value
    return encoded[: limit - len(_ELLIPSIS)].decode(errors="ignore") + _ELLIPSIS


@dataclass(frozen=True, order=True)
class ResourceKey:
    """provider/resourceType/resourceId: one observed resource."""

    provider: str
    resource_type: str
    resource_id: str

    def __str__(self) -> str:
        return f"{self.provider}/{self.resource_type}/{self.resource_id}"

    @property
    def doc_id(self) -> str:
        """A Firestore document id (no '/', never '.' or '__x__')."""
        return f"{self.provider}~{self.resource_type}~{quote(self.resource_id, safe='')}"

    @classmethod
    def parse(cls, text: str) -> "ResourceKey":
        parts = text.split(RESOURCE_KEY_SEPARATOR, 2)
        if len(parts) != 3 or not all(parts):
            raise ValueError(f"expected PROVIDER/TYPE/ID, got {text!r}")
        return cls(*parts)

    @classmethod
    def from_doc_id(cls, doc_id: str) -> "ResourceKey":
        provider, resource_type, rid = doc_id.split("~", 2)
        return cls(provider, resource_type, unquote(rid))


def event_identity(provider: str, source: str, event_id: str) -> str:
    """The deduplication key of a CloudEvent: the provider its ingress topic proves, its source and id,
    hashed (length-prefixed: unambiguous).

    The provider is part of it because ``source`` is the provider's own claim: without it, one provider
    could publish another's next source+id on its own topic and have the other's real event answered
    ``duplicate`` (issue 25, item 1). Only ever pass the provider ingest derived from the topic
    (``StatusUpdate.key.provider``), never one the event names.
    """
    return hashlib.sha256(f"{len(provider)}:{provider}{len(source)}:{source}{event_id}".encode()).hexdigest()


def legacy_event_identity(source: str, event_id: str) -> str:
    """The dedup key ledger entries were written under before the provider was part of it: read (never
    written) by upsert for an update that is not newer than the stored state, until those entries have
    expired (the ledger's TTL after the deploy that changed the key; docs/lifecycle.md)."""
    return hashlib.sha256(f"{len(source)}:{source}{event_id}".encode()).hexdigest()


@dataclass(frozen=True)
class PubSubMessage:
    """One Pub/Sub message as a push subscription delivered it."""

    data: bytes
    attributes: Mapping[str, str]
    message_id: str
    publish_time: str | None = None
    topic: str | None = None  # short topic name, from the push endpoint path

    @property
    def size(self) -> int:
        return len(self.data) + sum(len(k) + len(v) for k, v in self.attributes.items())
