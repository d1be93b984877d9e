"""A report on its way to Pub/Sub (``Outgoing``), and what replaces one when a newer report of its resource
comes inside its window (``merge``: the newer, with what the older must not lose)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Mapping

from cloudevents.http import CloudEvent
from dcm_status_contracts import resync
from dcm_status_contracts.outputs import carried
from dcm_status_contracts.pubsub_binding import BindingMode, to_message


@dataclass(frozen=True)
class Outgoing:
    """One report on its way: the event, when it was taken, its attempts, its trace context."""

    event: CloudEvent
    reported_at: float  # the reporter's clock when report() took it
    attempt: int = 0
    trace: Mapping[str, str] = field(default_factory=dict)  # traceparent (and tracestate) when report() took it

    def message(self, binding: BindingMode) -> tuple[bytes, dict[str, str]]:
        """The Pub/Sub message: the event in its binding, with its trace context as attributes."""
        data, attrs = to_message(self.event, binding)
        return data, {**attrs, **self.trace}


def _inherit_resync(old: Outgoing, new: Outgoing) -> Outgoing:
    """A report replacing one of a resync batch carries the batch's marker (the batch stays whole)."""
    attrs = old.event.get_attributes()
    if resync.ID not in attrs or resync.ID in new.event.get_attributes():
        return new
    marker = {a: attrs[a] for a in resync.ATTRIBUTES if a in attrs}
    return Outgoing(CloudEvent({**new.event.get_attributes(), **marker}, new.event.get_data()), new.reported_at,
                     new.attempt, new.trace)


def _inherit_outputs(old: Outgoing, new: Outgoing) -> Outgoing:
    """A report replacing one that carried an output map it does not carry sends that map too."""
    old_data, new_data = old.event.get_data(), new.event.get_data()
    if not isinstance(old_data, dict) or not isinstance(new_data, dict):
        return new
    missing = {k: v for k, v in carried(old_data).items() if k not in carried(new_data)}
    if not missing:
        return new
    return Outgoing(CloudEvent(new.event.get_attributes(), {**new_data, **missing}), new.reported_at, new.attempt)


def merge(old: Outgoing, new: Outgoing) -> Outgoing:
    """What replaces ``old`` when ``new`` comes for its resource: ``new``, with what ``old`` must not lose."""
    return _inherit_outputs(old, _inherit_resync(old, new))
