"""Where one NATS message goes, decided without I/O: the provider's ingress topic, as the Pub/Sub message
ingest already accepts, or the dead-letter topic with a reason.

- The provider is read only from the subject's server-written prefix (``providers.{provider}.``): the
  server puts it there for the provider's account and no other (infra/nats_accounts.py). A subject that
  names no provider of ours is ``unknown_provider``.
- Both content modes of the CloudEvents NATS binding map onto the Pub/Sub binding ingest reads
  (shared/contracts/pubsub_binding.py): structured (the JSON event as the payload, what every upstream
  provider sends) as the message data, binary (``ce-*`` headers, ``content-type``) as the same attributes.
  Only those headers cross; the envelope is checked here with ingest's own decoder, so a payload that is
  not a CloudEvent is dead-lettered with ingest's reason (malformed_json, not_a_cloudevent, oversize).
- The message keeps where it was in NATS as attributes (``nats-stream-sequence``, ``nats-msg-id``), so a
  redelivery is recognisable. They are not ``dcm-*`` names (ingest strips those at ingress) because they
  vouch for nothing: a provider publishing to its Pub/Sub ingress topic directly could set them too, so
  nothing decides on them; deduplication stays the provider's (topic) + source + id.
- The subject the provider published on (``nats-subject``: ``dcm.container``, the server-written prefix
  removed): over NATS the subject names the resource type, and ingest reads the type from it when the
  CloudEvent's type names none (dcm_status_contracts.identity; docs/security.md, "The NATS subject").
  Not a ``dcm-*`` name either: it proves nothing a provider could not say in the CloudEvent's type.
- The resource key as ingest computes it, when the event names one: the ingress publishes each resource's
  updates in NATS's order (shared/nats_ingress/forward.py), with no Pub/Sub ordering key.
- Every attribute is within Pub/Sub's limits where it is built (``carried``: a key at most 256 bytes, a value
  at most 1,024, at most 100 of them): a NATS header may be longer than Pub/Sub carries, and Pub/Sub would
  refuse the publish with InvalidArgument, which no retry fixes. Such a message is ``oversize``: dead-lettered
  without the attributes Pub/Sub refuses (deadletter.rejection_attributes leaves them out and counts them).
  A value is never clipped: a clipped ``ce-id`` would be another event.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Mapping

from dcm_status_contracts import limits
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.identity import TRANSPORT_SUBJECT, resolve
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.pubsub_binding import binding_attributes, from_message

from shared.runtime.nats_settings import NatsSettings
from shared.runtime.settings import Settings

STREAM_SEQUENCE = "nats-stream-sequence"  # the message's sequence in the stream
SUBJECT = TRANSPORT_SUBJECT  # "nats-subject": the subject as the provider published it
MSG_ID = "nats-msg-id"  # the publisher's Nats-Msg-Id header (JetStream's deduplication id), when set
NATS_MSG_ID_HEADER = "Nats-Msg-Id"
SERVICE_NAME = "nats_ingress"  # what it signs its rejections, spans and logs with (a function's name elsewhere)


@dataclass(frozen=True)
class Inbound:
    """One message as the JetStream consumer delivered it."""

    subject: str
    data: bytes
    headers: Mapping[str, str]
    stream_sequence: int
    delivered: int  # how many times the consumer has delivered it, this time included
    published_at: str | None = None  # when the stream stored it (RFC 3339)

    @property
    def msg_id(self) -> str | None:
        return next((v for k, v in self.headers.items() if k.lower() == NATS_MSG_ID_HEADER.lower()), None)

    @property
    def message_id(self) -> str:
        """A message id for logs and dead letters: the stream sequence."""
        return f"nats-{self.stream_sequence}"


@dataclass(frozen=True)
class Outbound:
    """The Pub/Sub message one NATS message becomes, and where it goes."""

    provider: str
    topic: str  # short name of the provider's ingress topic
    data: bytes
    attributes: Mapping[str, str]
    resource_key: str = ""  # "" when the event names none ingest would accept (it dead-letters it)


def carried(attributes: Mapping[str, str]) -> Mapping[str, str]:
    """``attributes`` when Pub/Sub carries every one of them; else Rejected (oversize) naming those it refuses."""
    refused = limits.attribute_breaches(attributes)
    if refused:
        first = next(iter(refused.values()))
        raise Rejected(Reason.OVERSIZE, f"{len(refused)} header(s) Pub/Sub cannot carry as attributes: {first}",
                       {"attributes": [k[:64] for k in refused], "limit": "attribute"})
    if not limits.attributes_fit(len(attributes)):
        raise Rejected(Reason.OVERSIZE, f"{len(attributes)} CloudEvents headers, Pub/Sub carries at most "
                       f"{limits.PUBSUB_MAX_ATTRIBUTES} attributes", {"attributes": len(attributes)})
    return attributes


def known_provider(subject: str, nats: NatsSettings, settings: Settings) -> str | None:
    """The provider of ours the server-written prefix of ``subject`` names, or None."""
    provider = nats.provider_of_subject(subject)
    return provider if provider and (not settings.providers or provider in settings.providers) else None


def provider_of(message: Inbound, nats: NatsSettings, settings: Settings) -> str:
    """The provider the server-written prefix names; Rejected (unknown_provider) if none of ours."""
    provider = known_provider(message.subject, nats, settings)
    if provider is None:
        raise Rejected(Reason.UNKNOWN_PROVIDER, f"subject {message.subject!r} names no known provider "
                       f"(expected {nats.provider_prefix.replace('{provider}', '<provider>')}…)", {"subject": message.subject[:200]})
    return provider


def as_pubsub(message: Inbound, topic: str | None) -> PubSubMessage:
    """The message as ingest would see it on ``topic``: the payload, the binding's headers as attributes (no
    other header crosses)."""
    return PubSubMessage(message.data, binding_attributes(message.headers), message.message_id,
                         message.published_at, topic)


def _resource_key(pubsub: PubSubMessage, provider: str, settings: Settings) -> str:
    """The resource key ingest will compute, or "" when the event names none ingest would accept."""
    event = from_message(pubsub, settings.max_event_bytes)  # Rejected: not a CloudEvent at all
    try:
        return str(resolve(event.attributes, event.data if isinstance(event.data, dict) else {}, provider))
    except (Rejected, KeyError, TypeError):
        return ""  # ingest rejects it with its reason; no order to keep


def published_subject(subject: str, provider: str, nats: NatsSettings) -> str:
    """The subject as the provider published it (the server-written prefix removed), within a Pub/Sub
    attribute value: a longer one names no resource type anyway (one token after ``dcm.``)."""
    published = subject[len(nats.provider_prefix.replace("{provider}", provider)):]
    return published.encode()[:limits.PUBSUB_MAX_ATTRIBUTE_VALUE_BYTES].decode(errors="ignore")


def route(message: Inbound, nats: NatsSettings, settings: Settings) -> Outbound:
    """Where ``message`` goes (the provider's ingress topic), or Rejected saying why it cannot go there."""
    provider = provider_of(message, nats, settings)
    topic = settings.ingress_topic(provider)
    pubsub = as_pubsub(message, topic)
    attributes = {**pubsub.attributes, STREAM_SEQUENCE: str(message.stream_sequence),
                  SUBJECT: published_subject(message.subject, provider, nats)}
    if message.msg_id:
        attributes[MSG_ID] = message.msg_id
    carried(attributes)  # first: a header Pub/Sub cannot carry is why it cannot go, whatever else is wrong
    key = _resource_key(pubsub, provider, settings)
    return Outbound(provider, topic, message.data, attributes, key)
