"""How ingest trusts ``nats-subject`` (issue 38 item 1; docs/security.md, "The NATS subject"): the attribute
is read only when the CloudEvent's type names no resource type of ours, never overrides one that does, and
gives a provider publishing to its Pub/Sub topic directly nothing it could not say in the type itself: the
provider is still the topic's. Without it, such an event keeps its clear dead-letter reason."""

from __future__ import annotations

import orjson
import pytest
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.identity import TRANSPORT_SUBJECT
from dcm_status_contracts.model import PubSubMessage

from shared.ingest.normalize import normalize_message
from shared.runtime import settings

SETTINGS = settings.from_env()


def message(ce_type: str, subject: str | None, source: str = "dcm/providers/osac", provider: str = "osac"
            ) -> PubSubMessage:
    body = orjson.dumps({"specversion": "1.0", "id": "e-1", "source": source, "type": ce_type,
                         "time": "2026-11-28T10:00:00Z", "data": {"id": "r-1", "status": "RUNNING"}})
    attributes = {TRANSPORT_SUBJECT: subject} if subject is not None else {}
    return PubSubMessage(body, attributes, "m-1", "2026-11-28T10:00:01Z", SETTINGS.ingress_topic(provider))


def test_a_type_naming_no_resource_type_takes_the_subjects():
    assert str(normalize_message(message("dcm.status.updated", "dcm.container"), SETTINGS).key) == \
        "osac/container/r-1"


def test_without_the_attribute_it_keeps_its_clear_dead_letter_reason():
    with pytest.raises(Rejected) as refused:
        normalize_message(message("dcm.status.updated", None), SETTINGS)
    assert refused.value.reason is Reason.UNKNOWN_RESOURCE_TYPE and "'updated'" in refused.value.message


@pytest.mark.parametrize("subject", ["dcm.agents.health", "dcm.agent.env-1", "dcm.nothing", "dcm.", "x" * 2000])
def test_a_subject_naming_no_type_of_ours_changes_nothing(subject):
    with pytest.raises(Rejected) as refused:
        normalize_message(message("dcm.status.updated", subject), SETTINGS)
    assert refused.value.reason is Reason.UNKNOWN_RESOURCE_TYPE


def test_it_never_overrides_a_type_that_names_one():
    assert str(normalize_message(message("dcm.status.vm", "dcm.container"), SETTINGS).key) == "osac/vm/r-1"


def test_a_provider_setting_it_on_pubsub_gains_nothing_the_type_would_not_give_it():
    """osac writes the attribute itself: its event is a container of osac's, exactly as with type
    dcm.status.container; it can name no other provider (the topic says osac; a source naming aws is refused)."""
    forged = normalize_message(message("dcm.status.updated", "dcm.container"), SETTINGS)
    typed = normalize_message(message("dcm.status.container", None), SETTINGS)
    assert forged.key == typed.key and forged.status == typed.status
    with pytest.raises(Rejected) as refused:
        normalize_message(message("dcm.status.updated", "dcm.container", source="dcm/providers/aws"), SETTINGS)
    assert refused.value.reason is Reason.PROVIDER_MISMATCH
