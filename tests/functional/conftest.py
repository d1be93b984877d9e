"""Functional tier: each function through functions-framework's test client.

Pub/Sub is faked (we check what the function would publish); Firestore is the
real emulator, started once for the session.
"""

from __future__ import annotations

import base64
import os
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from functions_framework import create_app
from google.cloud import firestore as gfirestore
from openapi_core import Config, OpenAPI
from openapi_core.contrib.werkzeug import (
    WerkzeugOpenAPIRequest,
    WerkzeugOpenAPIResponse,
)
from werkzeug.test import EnvironBuilder

from infra.local import emulators
from tests.fakes import FakePublisher, runtime_of
from tests.samples import SCHEMAS

REPO = Path(__file__).resolve().parent.parent.parent
PROJECT = "dcm-test"


_ENTRIES: list[Any] = []  # the entry functions client_for loaded, re-bound for every test


@pytest.fixture(scope="session")
def firestore_emulator(tmp_path_factory):
    proc = emulators.start("firestore", tmp_path_factory.mktemp("fs-logs"))
    saved = os.environ.get("FIRESTORE_EMULATOR_HOST")
    os.environ["FIRESTORE_EMULATOR_HOST"] = proc.host
    yield proc
    proc.stop()
    if saved is None:
        os.environ.pop("FIRESTORE_EMULATOR_HOST", None)
    else:
        os.environ["FIRESTORE_EMULATOR_HOST"] = saved


@pytest.fixture
def firestore(firestore_emulator):
    emulators.reset_firestore(firestore_emulator.host, PROJECT)
    return gfirestore.Client(project=PROJECT)


@pytest.fixture
def publisher() -> FakePublisher:
    return FakePublisher()


@pytest.fixture(autouse=True)
def bind_runtime(request):
    """Every function under test gets this test's clients: its fake publisher, the emulator's Firestore."""
    fake = request.getfixturevalue("publisher") if "publisher" in request.fixturenames else FakePublisher()
    db = request.getfixturevalue("firestore") if "firestore" in request.fixturenames else None
    bind_all(runtime_of(publisher=fake, firestore=db, DCM_PROJECT=PROJECT))


def bind_all(runtime) -> None:
    """Every function loaded by client_for runs with ``runtime`` from now on."""
    for entry in _ENTRIES:
        entry.bind(runtime)


def client_for(name: str, signature_type: str = "cloudevent"):
    source = REPO / "functions" / name / "main.py"
    app = create_app(target=name, source=str(source), signature_type=signature_type)
    _ENTRIES.append(getattr(sys.modules[source.stem], name))  # create_app loaded main.py as module "main"
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


# ---- the api, every answer checked against its OpenAPI document ------------------------------------
OPENAPI = OpenAPI.from_file_path(str(SCHEMAS / "openapi" / "status-api-v1.json"),
                                 config=Config(extra_media_type_deserializers={
                                     "application/problem+json": orjson.loads,
                                     "text/csv": lambda body: body.decode()}))  # /v1/usage?format=csv


class Checked:
    """The test client, every response validated against the OpenAPI document."""

    def __init__(self, client):
        self.client = client

    def get(self, path: str, **kwargs):
        return self.open("GET", path, **kwargs)

    def open(self, method: str, path: str, **kwargs):
        response = self.client.open(path, method=method, **kwargs)
        if path.startswith("/v1/") and "/stream" not in path:
            sent = EnvironBuilder(path, method=method, **kwargs).get_request()  # the app consumed its body
            OPENAPI.validate_response(WerkzeugOpenAPIRequest(sent), WerkzeugOpenAPIResponse(response))
            if response.status_code >= 400:
                assert response.mimetype == "application/problem+json"
                assert response.json["status"] == response.status_code and response.json["detail"]
        return response


@pytest.fixture(scope="module")
def client():
    return client_for("api", signature_type="http")


@pytest.fixture
def api(client, firestore):
    bind_all(runtime_of(firestore=firestore, DCM_PROJECT=PROJECT, DCM_FEED_SETTLE_SECONDS="0",
                        DCM_STREAM_SECONDS="0.5"))
    return Checked(client)


@pytest.fixture(scope="module")
def ingest():
    return client_for("ingest")


@pytest.fixture(scope="module")
def upsert():
    return client_for("upsert")


@pytest.fixture(scope="module")
def sweep():
    return client_for("sweep")


@pytest.fixture(scope="module")
def billing():
    return client_for("billing")


@pytest.fixture(scope="module")
def audit():
    return client_for("audit")


@pytest.fixture(scope="module")
def deadletter():
    return client_for("deadletter")
from tests.pipeline import pipeline  # noqa: E402,F401  (the in-process pipeline, issue 41; imports this module)
