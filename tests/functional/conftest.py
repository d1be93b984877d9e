"""Functional tier: each function through functions-framework's test client.

Pub/Sub is faked (we check what the function would publish); Firestore is the
real emulator, started once for the session.
"""

from __future__ import annotations

import base64
import os
from pathlib import Path
from typing import Any

import orjson
import pytest
from functions_framework import create_app

from infra import emulators
from shared import clients, config
from tests.fakes import FakePublisher

REPO = Path(__file__).resolve().parent.parent.parent
PROJECT = "dcm-test"


@pytest.fixture(scope="session")
def firestore_emulator(tmp_path_factory):
    proc = emulators.start("firestore", tmp_path_factory.mktemp("fs-logs"))
    saved = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ["FIRESTORE_EMULATOR_HOST"] = proc.host
    config.settings.cache_clear()  # settings and clients are per process: start from this tier's env
    clients.firestore_client.cache_clear()
    yield proc
    proc.stop()
    clients.firestore_client.cache_clear()
    if saved is None:
        os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
    else:
        os.environ["FIRESTORE_EMULATOR_HOST"] = saved


@pytest.fixture(autouse=True)
def functional_env(monkeypatch, request):
    """Each functional test sees this tier's settings, whatever else ran in the session."""
    monkeypatch.setenv("DCM_PROJECT", PROJECT)
    monkeypatch.setenv("DCM_LOCAL_MODE", "1")
    for name in ("GOOGLE_CLOUD_PROJECT", "DCM_TOPIC_NORMALIZED", "DCM_TOPIC_CHANGED", "DCM_TOPIC_DEADLETTER",
                 "DCM_INGRESS_TOPIC_TEMPLATE"):
        monkeypatch.delenv(name, raising=False)
    if "firestore_emulator" in request.fixturenames:
        monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", request.getfixturevalue("firestore_emulator").host)
    config.settings.cache_clear()
    clients.firestore_client.cache_clear()
    yield
    config.settings.cache_clear()
    clients.firestore_client.cache_clear()


@pytest.fixture
def firestore(firestore_emulator):
    emulators.reset_firestore(firestore_emulator.host, PROJECT)
    return clients.firestore_client()


@pytest.fixture
def publisher(monkeypatch) -> FakePublisher:
    fake = FakePublisher()
    monkeypatch.setattr(clients, "publisher_client", lambda: fake)
    return fake


def client_for(name: str):
    app = create_app(target=name, source=str(REPO / "functions" / name / "main.py"), signature_type="cloudevent")
    return app.test_client()


def push_body(data: bytes, attributes: dict[str, str] | None = None, message_id: str = "m-1") -> dict[str, Any]:
    return {"message": {"data": base64.b64encode(data).decode(), "attributes": attributes or {},
                        "messageId": message_id, "publishTime": "2026-01-01T00:00:01Z"},
            "subscription": f"projects/{PROJECT}/subscriptions/test"}


def post_push(client, topic: str, data: bytes, attributes: dict[str, str] | None = None, message_id: str = "m-1"):
    """The raw Pub/Sub push shape, endpoint path carrying the topic (as we wire it)."""
    return client.post(f"/projects/{PROJECT}/topics/{topic}", json=push_body(data, attributes, message_id))


def post_eventarc_binary(client, topic: str, data: bytes, attributes: dict[str, str] | None = None,
                         message_id: str = "m-1"):
    """messagePublished CloudEvent in HTTP binary mode (how Eventarc delivers)."""
    headers = {"ce-specversion": "1.0", "ce-id": message_id, "ce-type": "google.cloud.pubsub.topic.v1.messagePublished",
               "ce-source": f"//pubsub.googleapis.com/projects/{PROJECT}/topics/{topic}",
               "content-type": "application/json"}
    return client.post("/", data=orjson.dumps(push_body(data, attributes, message_id)), headers=headers)


def post_eventarc_structured(client, topic: str, data: bytes, attributes: dict[str, str] | None = None,
                             message_id: str = "m-1"):
    """messagePublished CloudEvent in HTTP structured mode."""
    event = {"specversion": "1.0", "id": message_id, "type": "google.cloud.pubsub.topic.v1.messagePublished",
             "source": f"//pubsub.googleapis.com/projects/{PROJECT}/topics/{topic}",
             "datacontenttype": "application/json", "data": push_body(data, attributes, message_id)}
    return client.post("/", data=orjson.dumps(event), headers={"content-type": "application/cloudevents+json"})


SHAPES = {"push": post_push, "binary": post_eventarc_binary, "structured": post_eventarc_structured}
