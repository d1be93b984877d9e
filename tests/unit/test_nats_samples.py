"""The NATS publishes of the newer upstream producers (schemas/samples/nats/): the upstream e2e suite's test
publisher, its six malformed messages, kcli, the CloudNativePG database provider and the environment-agent's
embedded monitors. Each goes through the NATS ingress's route (shared/nats_ingress/route.py) as published on
its subject under its provider's identity, then through ingest's checks; each lands where its file says.

The test publisher is dcm-project/utilities ``tests/e2e/api_status_reader_test.go`` (58b5858, and the newest
version in the file index); kcli dcm-project/enhancements ``enhancements/kcli-sp/kcli-sp.md`` at 0f7e4e6;
cnpg ``enhancements/cloudnative-pg-database-sp/cloudnative-pg-sp.md`` at ce144d4; the agent's monitors
dcm-project/environment-agent ``internal/openshift/container/monitoring/reconcile.go`` at 17d2e0d and
``internal/openshift/network/monitoring/event.go`` at c70fcd6 (each sample names its own).
"""

from __future__ import annotations

import os

import pytest
from dcm_status_contracts.errors import Rejected
from dcm_status_contracts.model import PubSubMessage

from shared.ingest.admit import admit
from shared.ingest.normalize import normalize_message
from shared.nats_ingress.route import SUBJECT, Inbound, route
from shared.runtime import nats_settings
from shared.runtime import settings as settings_module
from tests import samples

NATS_SAMPLES = samples.load("nats")
PRODUCERS = {"e2e-test", "kcli", "cnpg-database", "env-agent"}
SETTINGS = settings_module.from_env({**os.environ, "DCM_PROVIDERS": ",".join(
    [*os.environ.get("DCM_PROVIDERS", "").split(","), *sorted(PRODUCERS)])})
NATS = nats_settings.nats_from_env({"NATS_URL": "nats://127.0.0.1:4222"})


def through_the_ingress(sample: samples.Sample) -> PubSubMessage:
    """What ingest receives: the ingress's Pub/Sub message on the provider's topic, as ingest admits it."""
    inbound = Inbound(f"providers.{sample.provider}.{sample.subject}", sample.data, dict(sample.attributes), 9, 1,
                      "2026-11-28T13:05:10Z")
    out = route(inbound, NATS, SETTINGS)
    message = PubSubMessage(out.data, dict(out.attributes), inbound.message_id, inbound.published_at, out.topic)
    return admit(message, SETTINGS.origins.arrival(message.topic), SETTINGS.origins)[0]


def test_every_producer_has_samples_naming_its_upstream_file_and_commit():
    assert {s.provider for s in NATS_SAMPLES} == PRODUCERS
    for s in NATS_SAMPLES:
        assert s.subject and s.subject.startswith("dcm."), s.name
        assert s.upstream["repo"].startswith("dcm-project/") and s.upstream["files"], s.name
        assert len(s.upstream["commit"]) == 40 and int(s.upstream["commit"], 16) >= 0, s.name
    database = {s.expect["status"] for s in NATS_SAMPLES if s.provider == "cnpg-database"}
    assert database == {"PENDING", "RUNNING", "FAILED", "UNKNOWN", "DELETING", "DELETED"}  # the proposal's six
    assert len([s for s in NATS_SAMPLES if s.name.startswith("e2e-test-malformed-")]) == 6  # the suite's six


@pytest.mark.parametrize("sample", NATS_SAMPLES, ids=lambda s: s.name)
def test_a_nats_sample_lands_where_its_file_says(sample):
    expect = sample.expect
    if expect.get("at") == "nats_ingress":  # not a CloudEvent at all: the ingress dead-letters it itself
        with pytest.raises(Rejected) as refused:
            through_the_ingress(sample)
        assert refused.value.reason.value == expect["reason"]
        return
    message = through_the_ingress(sample)
    assert message.attributes[SUBJECT] == sample.subject
    if "reason" in expect:
        with pytest.raises(Rejected) as refused:
            normalize_message(message, SETTINGS)
        assert refused.value.reason.value == expect["reason"], refused.value.message
        if "path" in expect:
            assert refused.value.detail["path"] == expect["path"]
        return
    update = normalize_message(message, SETTINGS)
    assert str(update.key) == expect["key"]
    assert (update.status, update.raw_status, update.status_recognized) == \
        (expect["status"], expect["rawStatus"], expect["recognized"])
    if "observedAt" in expect:
        assert update.observed_at == expect["observedAt"]


@pytest.mark.parametrize("sample", [s for s in NATS_SAMPLES if "reason" not in s.expect],
                         ids=lambda s: s.name)
def test_the_same_event_on_pubsub_is_read_alike_when_its_type_names_its_resource_type(sample):
    """Only the test publisher's ``dcm.status.updated`` needs the subject: every other producer's type names
    its resource type, so its bytes published to its Pub/Sub ingress topic are stored the same way."""
    message = PubSubMessage(sample.data, dict(sample.attributes), "1", "2026-11-28T13:05:10Z",
                            SETTINGS.ingress_topic(sample.provider))
    if sample.provider == "e2e-test":
        with pytest.raises(Rejected) as refused:
            normalize_message(message, SETTINGS)
        assert refused.value.reason.value == "unknown_resource_type"
        assert "updated" in refused.value.message
    else:
        assert str(normalize_message(message, SETTINGS).key) == sample.expect["key"]
