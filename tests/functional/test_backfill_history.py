"""infra/backfill_history.py (issue 32): history written before the ledger carried it, folded into the ledger."""

from __future__ import annotations

from datetime import timedelta

from dcm_status_contracts import timeutil
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.history import fold_history
from shared.state.documents import HISTORY_FIELDS, LEDGER
from tests.functional.test_api import seed

DOC = "aws~vm~b-1"


def as_before_issue_32(db) -> dict[str, dict]:
    """Rewrite what the current upsert stored into the layout of the version before: each history entry in
    resources/{key}/history, its ledger entry without the history fields and with expireAt. Returns the
    history entries by id."""
    old = {}
    for snap in db.collection(LEDGER).stream():
        entry = snap.to_dict()
        if "recordedAt" not in entry:
            continue
        history = {f: entry[f] for f in HISTORY_FIELDS if f in entry}
        db.collection("resources").document(entry["key"].replace("/", "~")).collection("history").document(
            snap.id).set(history)
        ledger = {k: v for k, v in entry.items() if k not in HISTORY_FIELDS or k in ("status", "eventId", "outcome")}
        snap.reference.set({**ledger, "expireAt": timeutil.now() + timedelta(days=7)})
        old[snap.id] = history
    return old


def test_the_backfill_folds_old_history_into_the_ledger_once(api, firestore):
    seed(firestore, "aws", "vm", "b-1", "PROVISIONING", "2026-03-01T10:00:00Z", "b1")
    seed(firestore, "aws", "vm", "b-1", "RUNNING", "2026-03-01T10:05:00Z", "b2")
    between = timeutil.now_str()
    seed(firestore, "aws", "vm", "b-1", "STOPPED", "2026-03-01T10:10:00Z", "b3")
    assert seed(firestore, "aws", "vm", "b-1", "FAILED", "2026-03-01T10:01:00Z", "b0").outcome == "stale"
    history = api.get("/v1/resources/aws/vm/b-1/history").json["entries"]
    at = api.get(f"/v1/resources/aws/vm/b-1?at={between}").json
    assert [e["eventId"] for e in history] == ["b3", "b2", "b0", "b1"] and at["state"]["eventId"] == "b2"

    old = as_before_issue_32(firestore)
    assert len(old) == 4
    expired = next(i for i, h in old.items() if h["eventId"] == "b1")
    firestore.collection(LEDGER).document(expired).delete()  # its ledger entry's TTL ran out
    # before the backfill: the old history is not read (docs/api.md says so)
    assert api.get("/v1/resources/aws/vm/b-1/history").json["entries"] == []
    assert api.get(f"/v1/resources/aws/vm/b-1?at={between}").status_code == 404

    assert fold_history(firestore, page=3) == {"updated": 3, "created": 1, "kept": 0}
    assert api.get("/v1/resources/aws/vm/b-1/history").json["entries"] == history
    assert api.get(f"/v1/resources/aws/vm/b-1?at={between}").json == at
    entries = {s.id: s.to_dict() for s in firestore.collection(LEDGER).stream()}
    assert all("expireAt" not in e for e in entries.values())
    created = entries[expired]
    assert created["key"] == "aws/vm/b-1" and created["outcome"] == "applied" and created["source"]
    assert not {"change", "committedAt", "shard", "expireAt"} & set(created)  # not in the change feed
    changes = [s.to_dict()["change"] for s in
               firestore.collection(LEDGER).where(filter=FieldFilter("change", "!=", None)).stream()]
    assert len(changes) == 3  # the other entries keep their change event (and their place in the feed)

    # idempotent: a second run folds nothing
    assert fold_history(firestore) == {"updated": 0, "created": 0, "kept": 4}
    assert {s.id: s.to_dict() for s in firestore.collection(LEDGER).stream()} == entries

    # the event whose entry had expired is a duplicate now, however late its redelivery
    result = seed(firestore, "aws", "vm", "b-1", "PROVISIONING", "2026-03-01T10:00:00Z", "b1")
    assert result.outcome == "duplicate" and result.ledger_id == expired


def test_the_backfill_leaves_other_history_collections_and_a_database_without_old_history(firestore):
    firestore.collection("elsewhere").document("x").collection("history").document("h").set({"status": "X"})
    assert fold_history(firestore) == {"updated": 0, "created": 0, "kept": 0}
    assert not list(firestore.collection(LEDGER).stream())


def test_the_backfill_stops_with_one_line_and_asks_for_a_rerun(capsys, monkeypatch):
    from infra import backfill_history

    assert backfill_history.main(["--project", "p", "--page", "501"]) == 2
    assert capsys.readouterr().err.count("\n") == 1

    monkeypatch.setattr(backfill_history, "fold_history", lambda db, page: (_ for _ in ()).throw(
        RuntimeError("deadline exceeded")))
    monkeypatch.setenv("FIRESTORE_EMULATOR_HOST", "127.0.0.1:1")
    assert backfill_history.main(["--project", "p"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "deadline exceeded" in err and "rerun" in err
