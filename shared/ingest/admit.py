"""What ingest may believe of a message's attributes: the provider proves nothing but its topic.

On a provider's ingress topic every platform attribute (``dcm-*``, Pub/Sub's dead-letter ones) is
dropped before anything reads it: a provider cannot mark its event as the replay of a dead letter
(whose entry the marker would name: issue 25, item 6), nor pass any other platform annotation off as
ours. Replay markers are kept only on a message from the replay topic, which only the replay path
(``dcm-status dlq replay``) may publish to; such a message names the ingress topic it is for
(``dcm-replay-topic``), which then says who the provider is, as the topic itself does on first delivery.
"""

from __future__ import annotations

import dataclasses

from dcm_status_contracts import deadletter as dl
from dcm_status_contracts import ingress
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import PubSubMessage


def admit(message: PubSubMessage, arrival: ingress.Arrival,
          origins: ingress.Origins) -> tuple[PubSubMessage, ingress.Arrival]:
    """``message`` with only the attributes its origin (``arrival``) can vouch for, and that arrival; from the
    replay topic, as if it had arrived on the ingress topic it is for (and that topic's arrival). Rejected
    (malformed_internal) for a replay that names none."""
    kept = ingress.provider_attributes(message.attributes)
    if not arrival.replayed:
        return dataclasses.replace(message, attributes=kept), arrival
    target = origins.replay_arrival(message.attributes)
    if target is None:
        raise Rejected(Reason.MALFORMED_INTERNAL,
                       f"a replayed message must name the ingress topic it is for in {dl.REPLAY_TOPIC}",
                       {"attribute": dl.REPLAY_TOPIC, "value": message.attributes.get(dl.REPLAY_TOPIC)})
    markers = {k: message.attributes[k] for k in dl.REPLAY_MARKERS if k in message.attributes}
    return dataclasses.replace(message, attributes={**kept, **markers}, topic=target.topic), target
