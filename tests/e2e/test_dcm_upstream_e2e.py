"""The DCM project's own status-reader suite, replayed on the local stack (issue 38).

Upstream: dcm-project/utilities ``tests/e2e/api_status_reader_test.go``. Read at 58b585814ef8c9bd098152aa4cd19bf7b4f2d3b6
(the file index's listed version), 3f201ded79893755433f793d865a535ef9710946 and the newest version the index
holds (its commit not given by the index; 55,589 characters, later than the snapshot's 3dcc40f): its assertions
are the current control-plane's, status lower-cased (``instanceStatusRunning = "running"``,
``strings.ToLower(customStatus)``) and an empty status applied. Its publisher is replayed byte for byte in
form: core NATS ``conn.Publish("dcm.container", json.Marshal(map))`` (keys sorted), ``type:
dcm.status.updated``, ``source: dcm/providers/e2e-test``, no ``subject``, ``time.Now().Format(time.RFC3339)``
(whole seconds, the local offset), ``data {id, status, message, timestamp}``; here it publishes as a provider
of ours with its own NATS identity (``e2e-test``, the session stack's providers), so the server writes its
prefix and the ingress forwards it to that provider's topic (``nats-subject`` names the type: docs/nats.md).

Every ``It`` that needs no catalog or placement service is replayed: status propagation through the instance
and list routes, repeated reads, ``update_time``, three instances independently, arbitrary value pass-through,
last write wins within one publisher, the fake instance and the six malformed messages leaving health at 200
and later events still processed. What needs the catalog (creating an instance, "a status field immediately
after creation", deletion through ``/catalog-item-instances``, the bad-image container) has no counterpart:
here an instance exists once its provider reports it. Each deliberate difference is a test named
``test_difference_*``; docs/api.md ("DCM compatibility") states each with its upstream file and commit.

Also here, the newer producers over the same NATS (schemas/samples/nats/: kcli, CloudNativePG, the
environment-agent's embedded monitors) and the newest DCM CLI's read (``agent_name``, a bearer token).
"""

from __future__ import annotations

import asyncio
import uuid
from datetime import datetime, timezone
from typing import Any
from urllib.parse import quote

import orjson
import pytest
import requests
from google.cloud.firestore_v1.base_query import FieldFilter

from tests import samples
from tests.e2e.conftest import E2EStack, wait_until
from tests.e2e.test_dcm_api import dcm_get
from tests.e2e.test_nats import connect

pytestmark = pytest.mark.e2e
PUBLISHER = "e2e-test"  # the suite's test publisher, as a provider of ours with its own NATS identity
SUBJECT = "dcm.container"
NATS_SAMPLES = samples.load("nats")
MALFORMED = [  # the suite's six, as it publishes them (malformedPayloads)
    b"",
    b"this is not json at all!!!",
    b'{"foo": "bar"}',
    b'{"specversion":"1.0","id":"test","source":"test","type":"test","data":null}',
    b'{"specversion":"1.0","id":"test","source":"test","type":"test","data":"just a string"}',
    b'{"specversion":"1.0","id":"test","source":"test","type":"test","datacontenttype":"application/json",'
    b'"data":{"status":"RUNNING","message":"no id field"}}',
]


def rfc3339_now() -> str:
    """Go's ``time.Now().Format(time.RFC3339)``: whole seconds, the local offset ("Z" in UTC)."""
    text = datetime.now().astimezone().replace(microsecond=0).isoformat()
    return text[:-6] + "Z" if text.endswith("+00:00") else text


def status_event(resource_id: str, status: str, message: str, source: str = f"dcm/providers/{PUBLISHER}") -> bytes:
    """The suite's event: a map marshalled by encoding/json (keys in sorted order, at every level)."""
    now = rfc3339_now()
    return orjson.dumps({"data": {"id": resource_id, "message": message, "status": status, "timestamp": now},
                         "datacontenttype": "application/json", "id": str(uuid.uuid4()), "source": source,
                         "specversion": "1.0", "time": now, "type": "dcm.status.updated"},
                        option=orjson.OPT_SORT_KEYS)


def publish(e2e: E2EStack, payloads: list[bytes], provider: str = PUBLISHER, subject: str = SUBJECT) -> None:
    """``nats.Connect``, ``conn.Publish`` each on one connection (core NATS, in order), ``conn.Flush``."""
    async def go() -> None:
        nc = await connect(e2e, provider)
        try:
            for payload in payloads:
                await nc.publish(subject, payload)
            await nc.flush()
        finally:
            await nc.close()

    asyncio.run(go())


def instance(e2e: E2EStack, resource_id: str, **params: Any) -> requests.Response:
    return dcm_get(e2e, f"service-type-instances/{quote(resource_id, safe='')}", **params)


def status_of(e2e: E2EStack, resource_id: str) -> str:
    """The suite's poll: the instance's status, "" while it is not there."""
    response = instance(e2e, resource_id)
    return response.json().get("status", "") if response.status_code == 200 else ""


def eventually_status(e2e: E2EStack, resource_id: str, status: str, timeout: float = 60) -> None:
    wait_until(lambda: status_of(e2e, resource_id) == status, timeout, interval=0.5,
               what=f"{resource_id} to read {status!r}")


def listed(e2e: E2EStack, **params: Any) -> list[dict[str, Any]]:
    """``GET /service-type-instances?service_type=container``, every page (the suite reads the first; a
    session stack holds more containers than one page, so its next_page_token is followed, as the CLI does)."""
    found, token = [], None
    while True:
        response = dcm_get(e2e, "service-type-instances", **params, **({"page_token": token} if token else {}))
        assert response.status_code == 200, response.text
        found += response.json()["instances"]
        token = response.json().get("next_page_token")
        if not token:
            return found


def dead_letters(e2e: E2EStack, since: datetime, **filters: Any) -> list[dict[str, Any]]:
    return [d for d in e2e.deadletters(provider=PUBLISHER, since=since, **filters)]


# ---- status propagation through the gateway API -------------------------------------------------------------
def test_status_propagates_through_the_instance_and_list_routes_and_stays(e2e, uid):
    """"reaches RUNNING status via NATS consumer update", "returns status in the list endpoint", "persists
    status across repeated reads", "includes update_time reflecting the status change"."""
    rid = f"sr-{uid}"
    publish(e2e, [status_event(rid, "RUNNING", "container is running")])
    eventually_status(e2e, rid, "running")  # instanceStatusRunning
    mine = [i for i in listed(e2e, service_type="container") if i["id"] == rid]
    assert [i["status"] for i in mine] == ["running"]  # the list shows what the instance route shows
    for _ in range(3):
        assert status_of(e2e, rid) == "running"
    body = instance(e2e, rid).json()
    assert body["update_time"]  # set once the status event was applied
    assert body["agent_name"] == PUBLISHER and body["service_type"] == "container"


def test_three_instances_reach_running_independently_and_show_together(e2e, uid):
    """"each instance reaches RUNNING independently", "all instances show RUNNING simultaneously in list"."""
    rids = [f"multi-{n}-{uid}" for n in range(3)]
    publish(e2e, [status_event(r, "RUNNING", "container is running") for r in rids])
    for rid in rids:
        eventually_status(e2e, rid, "running")
    shown = {i["id"]: i["status"] for i in listed(e2e, service_type="container") if i["id"] in rids}
    assert shown == {r: "running" for r in rids}


# ---- consumer edge cases: status value handling ---------------------------------------------------------------
def test_arbitrary_status_values_pass_through_lower_cased(e2e, uid):
    """"passes through arbitrary status values to the API": CUSTOM_STATE_12345 reads custom_state_12345."""
    rid = f"edge-{uid}"
    publish(e2e, [status_event(rid, "RUNNING", "container is running")])
    eventually_status(e2e, rid, "running")
    publish(e2e, [status_event(rid, "CUSTOM_STATE_12345", "testing arbitrary status pass-through")])
    eventually_status(e2e, rid, "custom_state_12345")


def test_last_write_wins_within_one_publisher(e2e, uid):
    """"reflects last-write-wins when multiple status events arrive": RUNNING then PENDING at once on one
    connection, both stamped the same second: the later publication wins (docs/providers.md, ties)."""
    rid = f"lww-{uid}"
    publish(e2e, [status_event(rid, "KNOWN_STATE", "before")])
    eventually_status(e2e, rid, "known_state")
    publish(e2e, [status_event(rid, status, f"last-write-wins test: {status}") for status in ("RUNNING", "PENDING")])
    eventually_status(e2e, rid, "pending")  # instanceStatusPending
    key = f"{PUBLISHER}/container/{rid}"
    ledger = e2e.db.collection("events").where(filter=FieldFilter("key", "==", key))
    wait_until(lambda: len(list(ledger.stream())) == 3, 60, what="all three events processed")
    assert status_of(e2e, rid) == "pending" and e2e.resource(key)["rawStatus"] == "PENDING"  # RUNNING never won


# ---- consumer resilience ------------------------------------------------------------------------------------------
def test_the_fake_instance_and_six_malformed_messages_leave_health_200_and_later_events_processed(e2e, uid):
    """"publishes a status event for a non-existent instance without crashing the consumer", "publishes
    malformed data without crashing the consumer", and "still processes real status events" after each."""
    since = datetime.now(timezone.utc)
    fake = str(uuid.uuid4())
    publish(e2e, [status_event(fake, "RUNNING", "fake status for non-existent instance",
                               source="dcm/providers/e2e-fake-provider"), *MALFORMED])
    health = dcm_get(e2e, "health")
    assert health.status_code == 200 and health.json()["status"] == "ok"
    rid = f"after-{uid}"
    publish(e2e, [status_event(rid, "RUNNING", "container is running")])
    eventually_status(e2e, rid, "running")
    # and each of the seven is in the dead-letter archive with its reason, none lost, none applied
    wanted = {"provider_mismatch", "malformed_json", "not_a_cloudevent", "invalid_identity"}
    reasons = wait_until(lambda: (r := {d["reason"] for d in dead_letters(e2e, since)}) >= wanted and r, 60,
                         what="the fake and the malformed events dead-lettered")
    assert reasons >= wanted
    assert instance(e2e, fake).status_code == 404
    assert dcm_get(e2e, "health").status_code == 200


# ---- the newer producers over the same NATS (issue 38 item 4) ----------------------------------------------------
def unique(sample: samples.Sample, suffix: str) -> bytes:
    body = orjson.loads(sample.data)
    body["id"] += suffix
    body["data"]["id"] += suffix
    return orjson.dumps(body)


def test_kcli_cnpg_and_the_agents_monitors_over_nats_are_stored_in_their_types_vocabulary(e2e, uid):
    valid = [s for s in NATS_SAMPLES if s.provider != PUBLISHER and "reason" not in s.expect]
    suffixes = [f"-{n}-{uid}" for n in range(len(valid))]  # one resource per sample
    for s, suffix in zip(valid, suffixes):
        publish(e2e, [unique(s, suffix)], provider=s.provider, subject=s.subject)
    for s, suffix in zip(valid, suffixes):
        doc = wait_until(lambda: e2e.resource(s.expect["key"] + suffix), 60, what=f"{s.name} stored")
        assert (doc["status"], doc["rawStatus"], doc["statusRecognized"]) == \
            (s.expect["status"], s.expect["rawStatus"], True), s.name
        served = instance(e2e, s.expect["key"].rsplit("/", 1)[1] + suffix, show_deleted="true").json()
        assert served["status"] == s.expect["rawStatus"].lower(), s.name  # as the control-plane stores it
    assert {s.expect["key"].split("/")[1] for s in valid} >= {"vm", "cluster", "database", "container", "network"}


# ---- the newest DCM CLI (issue 38 item 5) ------------------------------------------------------------------------------
def test_the_newest_cli_lists_by_agent_name_with_a_bearer_token(e2e, uid):
    """``DCM_TOKEN=... dcm sp resource list --agent-name e2e-test``: ``agent_name`` sent, a bearer token on the
    request (dcm-project/cli internal/auth/transport.go at 1759958), the agent shown. A token the api cannot
    verify reads as none: the same answer."""
    rid = f"cli-{uid}"
    publish(e2e, [status_event(rid, "RUNNING", "container is running")])
    eventually_status(e2e, rid, "running")
    url = e2e.api_url + "api/v1alpha1/service-type-instances"
    params = {"agent_name": PUBLISHER, "max_page_size": 100}
    plain = requests.get(url, params=params, timeout=30)
    token = requests.get(url, params=params, headers={"Authorization": "Bearer not.a.verifiable-token"}, timeout=30)
    assert plain.status_code == token.status_code == 200
    assert {i["agent_name"] for i in token.json()["instances"]} == {PUBLISHER}
    assert rid in {i["id"] for i in token.json()["instances"]}


# ---- deliberate differences (docs/api.md, "DCM compatibility") ---------------------------------------------------------
def test_difference_an_empty_status_is_refused_with_its_reason_and_the_state_kept(e2e, uid):
    """Upstream now: "applies an empty status string from a status event" (the store overwrites with "").
    Here "" is no status: the event is dead-lettered (schema_invalid, /data/status) and the state kept."""
    rid = f"empty-{uid}"
    since = datetime.now(timezone.utc)
    publish(e2e, [status_event(rid, "KNOWN_STATE", "setting known state")])
    eventually_status(e2e, rid, "known_state")
    publish(e2e, [status_event(rid, "", "empty status test")])
    entry = wait_until(lambda: [d for d in dead_letters(e2e, since, reason="schema_invalid") if rid.encode() in d["data"]],
                       60, what="the empty status dead-lettered")
    assert entry[0]["detail"]["path"] == "/data/status"
    assert status_of(e2e, rid) == "known_state"


def test_difference_a_source_naming_another_provider_is_dead_lettered(e2e, uid):
    """Upstream's consumer reads no source and skips an instance it does not hold. Here a provider's event is
    the provider's only: ``dcm/providers/e2e-fake-provider`` published with e2e-test's identity is refused."""
    since = datetime.now(timezone.utc)
    rid = f"fake-{uid}"
    publish(e2e, [status_event(rid, "RUNNING", "fake", source="dcm/providers/e2e-fake-provider")])
    wait_until(lambda: [d for d in dead_letters(e2e, since, reason="provider_mismatch") if rid.encode() in d["data"]],
               60, what="the fake provider's event dead-lettered")
    assert instance(e2e, rid).status_code == 404


def test_difference_an_instance_exists_once_its_provider_reports_it(e2e, uid):
    """Upstream: the placement service creates the instance, with a status, before any event. Here there is no
    catalog: an id no provider reported is a 404, and any id a provider reports is an instance."""
    rid = f"new-{uid}"
    assert instance(e2e, rid).status_code == 404
    publish(e2e, [status_event(rid, "PENDING", "first word")])
    eventually_status(e2e, rid, "pending")


def test_difference_the_platforms_own_spelling_behind_status_case_upper(e2e, uid):
    """``status_case=upper``: the status on the container vocabulary (what this API served by default before),
    UNKNOWN for a value outside it; the provider's own word stays in ``rawStatus`` and the default answer."""
    rid = f"upper-{uid}"
    publish(e2e, [status_event(rid, "CUSTOM_STATE_12345", "custom")])
    eventually_status(e2e, rid, "custom_state_12345")
    assert instance(e2e, rid, status_case="upper").json()["status"] == "UNKNOWN"
