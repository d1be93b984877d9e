"""Golden CloudEvent samples (schemas/samples/{valid,invalid}/*.json), in one place.

Each sample file: {description, upstream?, topicProvider, subject?, message: {data | dataText, attributes?, padTo?}, expect}.
``upstream`` (in ``upstream/`` and ``nats/``): the producer's repository, commit and files the wire form was rebuilt
from. ``subject`` (in ``nats/``): the NATS subject the producer publishes on, as it publishes it (``dcm.container``);
those samples go through the NATS ingress first (``expect.at: nats_ingress`` when it is the ingress that refuses).
"""

from __future__ import annotations

import base64
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from dcm_status_contracts.model import PubSubMessage

SCHEMAS = Path(__file__).resolve().parent.parent / "schemas"  # the repository's JSON Schemas and golden samples
SAMPLES = SCHEMAS / "samples"


@dataclass(frozen=True)
class Sample:
    name: str
    description: str
    provider: str
    data: bytes
    attributes: dict[str, str]
    expect: dict[str, Any]
    upstream: dict[str, Any] | None = None
    subject: str | None = None  # nats/: the subject the producer publishes on

    def message(self, message_id: str = "1", topic_template: str = "dcm-status-ingress-{provider}") -> PubSubMessage:
        return PubSubMessage(self.data, self.attributes, message_id, "2026-01-01T00:00:01Z",
                             topic_template.replace("{provider}", self.provider))

    def push_body(self, message_id: str = "1") -> dict[str, Any]:
        """The JSON body a Pub/Sub push subscription POSTs."""
        return {"message": {"data": base64.b64encode(self.data).decode(), "attributes": self.attributes,
                            "messageId": message_id, "publishTime": "2026-01-01T00:00:01Z"},
                "subscription": f"projects/p/subscriptions/dcm-ingest-{self.provider}"}


def _load(path: Path) -> Sample:
    doc = orjson.loads(path.read_bytes())
    msg = doc["message"]
    if "dataText" in msg:
        data = msg["dataText"].encode()
    else:
        payload = msg["data"]
        if "padTo" in msg:
            text = orjson.dumps(payload).decode()
            payload = orjson.loads(text.replace("PAD", "x" * (msg["padTo"] - len(text))))
        data = orjson.dumps(payload)
    return Sample(path.stem, doc["description"], doc["topicProvider"], data, msg.get("attributes", {}),
                  doc["expect"], doc.get("upstream"), doc.get("subject"))


def load(kind: str) -> list[Sample]:
    """``valid``, ``invalid``, ``upstream`` (real producers' wire forms, all valid) or ``nats`` (producers'
    NATS publishes, valid or not, each with its subject)."""
    return [_load(p) for p in sorted((SAMPLES / kind).glob("*.json"))]
