"""The minimal reference handlers benchmarks/pipeline.py measures ingest and upsert against (issue 32).

Served exactly as the real functions are (functions-framework under the stack's gunicorn settings, its
keeper, its environment, the same client libraries built the same way, pushed by subscriptions copied from
the real ones), each makes the calls its real function makes for one new event, and nothing else:

- ``ingest``: decode the push, parse the event, one schema validation (the envelope and the data schema,
  compiled), one publish (with its ordering key) to the next topic;
- ``upsert``: decode the push, parse the update, one ``get_all`` of the ledger entry and the resource, one
  batch (ledger entry created, resource created or updated with its precondition, history entry set), one
  publish of the change.

No tracing, no logging, no outbox bookkeeping, no settings: the floor the real functions' CPU is compared to.
The topics and collections come from the environment the bench sets (``MIN_*``).
"""

from __future__ import annotations

import base64
import os

import functions_framework
import orjson
from dcm_status_contracts.schemas import ENVELOPE_URI, registry

from shared.runtime.clients import FirestoreClient, publisher_client

PROJECT = os.environ.get("DCM_PROJECT", "dcm-bench")
NORMALIZED = f"projects/{PROJECT}/topics/{os.environ.get('MIN_NORMALIZED_TOPIC', 'bench-min-normalized')}"
CHANGED = f"projects/{PROJECT}/topics/{os.environ.get('MIN_CHANGED_TOPIC', 'bench-min-changed')}"
PREFIX = os.environ.get("MIN_COLLECTION_PREFIX", "bench-min-")
_schemas = registry()
_envelope = _schemas.get(ENVELOPE_URI).check
_clients: dict[str, object] = {}


def _publisher():
    if "publisher" not in _clients:
        _clients["publisher"] = publisher_client()
    return _clients["publisher"]


def _db() -> FirestoreClient:
    if "db" not in _clients:
        _clients["db"] = FirestoreClient(project=PROJECT)
    return _clients["db"]


def _key(doc: dict) -> str:
    """provider~type~id from ``dcm.providers.PROVIDER.TYPE.instances.ID.status``."""
    parts = doc["type"].split(".")
    return f"{parts[2]}~{parts[3]}~{parts[5]}"


def _payload(event) -> bytes:
    return base64.b64decode(event.data["message"]["data"])


@functions_framework.cloud_event
def min_ingest(event) -> None:
    doc = orjson.loads(_payload(event))
    _envelope(doc)
    _schemas.get(doc["dataschema"]).check(doc["data"])
    key = _key(doc)
    _publisher().publish(NORMALIZED, orjson.dumps(doc), ordering_key=key, key=key, provider=key.split("~")[0],
                         resourceType=key.split("~")[1], status=doc["data"]["status"]).result(timeout=30)


@functions_framework.cloud_event
def min_upsert(event) -> None:
    doc = orjson.loads(_payload(event))
    db = _db()
    ledger = db.collection(f"{PREFIX}events").document(doc["id"])
    resource = db.collection(f"{PREFIX}resources").document(_key(doc))
    snaps = {s.reference.path: s for s in db.get_all([ledger, resource])}
    current = snaps[resource.path]
    if snaps[ledger.path].exists:
        return
    batch = db.batch()
    batch.create(ledger, {"outcome": "applied", "key": resource.id, "eventId": doc["id"]})
    if current.exists:
        batch.update(resource, doc, option=db.write_option(last_update_time=current.update_time))
    else:
        batch.create(resource, doc)  # the event as the state, and as its history entry
    batch.set(resource.collection("history").document(doc["id"]), doc)
    batch.commit()
    _publisher().publish(CHANGED, orjson.dumps(doc), key=resource.id).result(timeout=30)
