"""The newer producers' NATS publishes (schemas/samples/nats/) through the NATS ingress's route and then the
ingest function (functions-framework's test client, a push delivery): the subject the ingress forwards as
``nats-subject`` crosses the push wire and names the type of the DCM e2e suite's ``dcm.status.updated``;
kcli's, CloudNativePG's and the environment-agent's events are forwarded in their types' vocabularies;
what cannot be stored is dead-lettered with its reason (issue 38)."""

from __future__ import annotations

import os

import orjson
import pytest
from dcm_status_contracts import deadletter as dl

from shared.nats_ingress.route import SUBJECT, Inbound, route
from shared.runtime import nats_settings
from shared.runtime import settings as settings_module
from tests import samples
from tests.functional.conftest import SHAPES

THROUGH_INGEST = [s for s in samples.load("nats") if s.expect.get("at") != "nats_ingress"]
SETTINGS = settings_module.from_env({**os.environ, "DCM_PROVIDERS": ""})  # any provider the subject names
NATS = nats_settings.nats_from_env({"NATS_URL": "nats://127.0.0.1:4222"})


@pytest.mark.parametrize("sample", THROUGH_INGEST, ids=lambda s: s.name)
def test_a_nats_publish_forwarded_by_the_ingress_is_ingested_as_its_file_says(ingest, publisher, sample):
    out = route(Inbound(f"providers.{sample.provider}.{sample.subject}", sample.data, dict(sample.attributes), 3, 1,
                        "2026-11-28T13:05:10Z"), NATS, SETTINGS)
    assert out.attributes[SUBJECT] == sample.subject
    resp = SHAPES["push"](ingest, out.topic, out.data, dict(out.attributes))
    assert resp.status_code == 200, resp.data
    if "reason" in sample.expect:
        [letter] = publisher.on("dcm-status-deadletter")
        assert letter.attributes[dl.REASON] == sample.expect["reason"]
        assert letter.data == sample.data and letter.attributes[SUBJECT] == sample.subject  # replayable as sent
        assert not publisher.normalized()
        return
    [forwarded] = publisher.normalized()
    body = orjson.loads(forwarded.data)
    assert (body["key"], body["status"], body["raw_status"]) == \
        (sample.expect["key"], sample.expect["status"], sample.expect["rawStatus"])
    assert not publisher.on("dcm-status-deadletter")
