"""docs/operations.md#restore, rehearsed on the Firestore emulator as far as it goes.

The emulator has no backups, backup schedules nor restore (its admin API answers 404: measured 2026-11-25,
google-cloud-cli 528), so the managed steps (a backup restored into a new database) cannot run here. What it
has is the managed export's format (``:export`` writes the ``.overall_export_metadata`` layout that
``gcloud firestore export`` writes) and an import into a running database, which is the rest of the
procedure: export what was restored, import it into the live database, then seek the upsert subscriptions
back to the backup's time so that every update since is applied again (the restored ledger answers
"duplicate" for the ones already in the backup).
"""

from __future__ import annotations

from typing import Any

import orjson

from infra.local import emulators
from tests.functional.conftest import PROJECT
from tests.functional.test_upsert import normalized, post, resource


def dump(db) -> dict[str, Any]:
    """Every document of the database, subcollections included, by path."""
    out: dict[str, Any] = {}

    def walk(collection) -> None:
        for snap in collection.stream():
            out[snap.reference.path] = snap.to_dict()
            for sub in snap.reference.collections():
                walk(sub)

    for collection in db.collections():
        walk(collection)
    return out


def test_an_export_imported_back_undoes_a_mistake_and_replay_brings_later_updates(
        upsert, firestore, publisher, firestore_emulator, tmp_path):
    post(upsert, normalized("RUNNING", "2026-01-01T10:00:00Z", "e1"), "n-1")
    post(upsert, normalized("STOPPED", "2026-01-01T11:00:00Z", "e2"), "n-2")
    backup = dump(firestore)
    assert "resources/aws~vm~i-1" in backup and sum(p.startswith("events/") for p in backup) == 2  # its history

    metadata = emulators.export_firestore(firestore_emulator.host, PROJECT, tmp_path / "backup")
    assert metadata.name.endswith(".overall_export_metadata")

    # the mistake: a resource deleted, another document overwritten
    firestore.recursive_delete(firestore.collection("resources"))
    assert resource(firestore) is None

    emulators.import_firestore(firestore_emulator.host, PROJECT, metadata)
    assert dump(firestore) == backup

    # after the restore: the upsert subscriptions are sought back to the backup's time, so Pub/Sub delivers
    # again what came since: what the backup holds is a duplicate, what it does not is applied
    post(upsert, normalized("STOPPED", "2026-01-01T11:00:00Z", "e2"), "n-2")
    post(upsert, normalized("RUNNING", "2026-01-01T12:00:00Z", "e3"), "n-3")
    doc = resource(firestore)
    assert doc["status"] == "RUNNING" and doc["updates"] == 3
    ids = [orjson.loads(c.data)["id"] for c in publisher.on("dcm-status-changed")]
    # e2's change may be announced again (the outbox, upsert/handler.py), with its id: consumers drop it
    assert len(set(ids)) == 3 and ids[-1] not in ids[:-1] and set(ids[2:-1]) <= {ids[1]}


def test_an_import_leaves_documents_the_export_does_not_hold(firestore, firestore_emulator, tmp_path):
    """As production's import: written after the export, a document survives it (the runbook says so)."""
    firestore.collection("resources").document("a").set({"status": "RUNNING"})
    metadata = emulators.export_firestore(firestore_emulator.host, PROJECT, tmp_path / "backup")
    firestore.collection("resources").document("a").set({"status": "WRONG"})
    firestore.collection("resources").document("b").set({"status": "LATER"})
    emulators.import_firestore(firestore_emulator.host, PROJECT, metadata)
    assert firestore.collection("resources").document("a").get().to_dict() == {"status": "RUNNING"}
    assert firestore.collection("resources").document("b").get().to_dict() == {"status": "LATER"}
