"""The provider-level event (a provider silent as a whole, then reporting again): its samples validate
and are exactly what encode emits; decode reads them back and refuses what is not one, saying why."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts import provider_event
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.model import PubSubMessage
from dcm_status_contracts.provider_event import ProviderState, ProviderTransition
from dcm_status_contracts.schemas import registry

from tests.samples import SCHEMAS

SAMPLES = SCHEMAS / "events" / "samples" / "provider-v1"
EVENTS = {
    "silent": ProviderTransition("aws", ProviderState.SILENT, "2026-03-01T10:15:00.000000Z",
                            "2026-03-01T09:00:00.000000Z", 4500),
    "reporting": ProviderTransition("aws", ProviderState.REPORTING, "2026-03-01T11:02:10.000000Z",
                               "2026-03-01T11:02:10.000000Z", 4500),
}


def message(body: bytes, attributes=None) -> PubSubMessage:
    return PubSubMessage(body, attributes or {}, "m", None, "dcm-status-providers")


@pytest.mark.parametrize("name", sorted(EVENTS))
def test_each_sample_is_what_encode_emits_and_decodes_back(name):
    sample = orjson.loads((SAMPLES / f"{name}.json").read_bytes())
    body, attributes = provider_event.to_message(EVENTS[name])
    assert {"attributes": attributes, "event": orjson.loads(body)} == sample
    assert registry().get(provider_event.SCHEMA_URI).violations(sample["event"]["data"]) == []
    assert provider_event.from_message(message(orjson.dumps(sample["event"]))) == EVENTS[name]


def test_every_state_has_a_sample():
    assert sorted(p.stem for p in SAMPLES.glob("*.json")) == sorted(s.value.lower() for s in ProviderState)


def test_the_id_is_the_transition_so_a_republished_one_is_the_same_event():
    again = ProviderTransition("aws", ProviderState.SILENT, "2026-03-01T10:15:00.000000Z", None, None)
    assert again.event_id == EVENTS["silent"].event_id != EVENTS["reporting"].event_id


@pytest.mark.parametrize("body, reason, says", [
    (b"{", Reason.MALFORMED_JSON, "not JSON"),
    (orjson.dumps({"type": "dcm.status.changed", "data": {}}), Reason.NOT_A_CLOUDEVENT, "dcm.provider.silent"),
    (orjson.dumps({"type": "dcm.provider.silent", "data": {"provider": "aws"}}), Reason.SCHEMA_INVALID, "/data"),
    (orjson.dumps({"type": "dcm.provider.silent"}), Reason.SCHEMA_INVALID, "no data object"),
])
def test_what_is_not_a_provider_event_is_refused_saying_why(body, reason, says):
    with pytest.raises(Rejected, match=says) as refused:
        provider_event.from_message(message(body))
    assert refused.value.reason is reason
