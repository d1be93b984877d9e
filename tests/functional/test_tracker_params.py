"""The Deltacloud tracker's own callback parameters (issue 29, part 3; shared/reference/
deltacloud-tracker-design.txt): ``track_hook`` / ``track_token`` on ``PUT`` of the resource itself and of
``.../callback``, ``track_hook=none`` deletes, and the resource's representation carries its callback
element. Through the real api (every answer checked against its OpenAPI document), then the guards of
issue 25 on the new forms (the api as deployed: production mode)."""

from __future__ import annotations

import pytest

from tests.functional.test_api import seed
from tests.functional.test_api_security import ALICE, BOB, HOOK, body, prod  # noqa: F401 (prod: a fixture)
from tests.functional.test_callbacks_api import write

LOCAL_HOOK = "http://127.0.0.1:9/hook"
RESOURCE = "/v1/resources/aws/vm/i-1"


@pytest.fixture
def resource(firestore):
    seed(firestore, "aws", "vm", "i-1", "RUNNING", "2026-04-01T10:00:00Z", "t1")
    return RESOURCE


@pytest.mark.parametrize("path", [RESOURCE, f"{RESOURCE}/callback"])
def test_track_hook_and_track_token_register_the_callback_the_resource_then_shows(api, resource, path):
    created = write(api, "PUT", path, query_string={"track_hook": LOCAL_HOOK, "track_token": "ABCDEFG42"})
    assert created.status_code == 201 and created.json["secret"].startswith("whsec_")
    shown = api.get(RESOURCE).json["callback"]
    assert shown == {"id": created.json["callback"]["id"], "href": f"{RESOURCE}/callback", "hook": LOCAL_HOOK,
                     "token": "ABCDEFG42", "redacted": False, "disabled": None}
    assert api.get(f"{RESOURCE}/callback").json["callback"]["token"] == "ABCDEFG42"


@pytest.mark.parametrize("path", [RESOURCE, f"{RESOURCE}/callback"])
def test_track_hook_none_removes_the_callback(api, resource, path):
    assert write(api, "PUT", path, query_string={"track_hook": LOCAL_HOOK}).status_code == 201
    assert write(api, "PUT", path, query_string={"track_hook": "none"}).status_code == 204
    assert api.get(RESOURCE).json["callback"] is None
    assert api.get(f"{RESOURCE}/callback").status_code == 404
    assert write(api, "PUT", path, query_string={"track_hook": "none"}).status_code == 404


def test_a_put_on_the_resource_overwrites_its_callback_as_the_tracker_says(api, resource):
    first = write(api, "PUT", f"{RESOURCE}?track_hook={LOCAL_HOOK}")
    again = write(api, "PUT", f"{RESOURCE}?track_hook=http://127.0.0.1:8/other&track_token=T2")
    assert again.status_code == 200 and again.json["callback"]["id"] == first.json["callback"]["id"]
    assert again.json["secret"] not in (None, first.json["secret"])  # a new hook, a new secret
    assert api.get(RESOURCE).json["callback"]["hook"] == "http://127.0.0.1:8/other"


def test_a_resource_without_a_callback_shows_callback_null(api, resource):
    assert api.get(RESOURCE).json["callback"] is None


@pytest.mark.parametrize("path, query, parameter", [
    *[(path, query, parameter) for path in (RESOURCE, f"{RESOURCE}/callback") for query, parameter in [
        ({"track_hook": "x" * 2049}, "track_hook"),
        ({"track_hook": "http://169.254.169.254/latest/meta-data"}, "hook"),  # vetted as hook= is (SSRF)
        ({"track_hook": LOCAL_HOOK, "at": "2026-01-01T00:00:00Z"}, "at")]],
    (f"{RESOURCE}/callback", {"hook": LOCAL_HOOK, "track_hook": LOCAL_HOOK}, "track_hook"),
    (f"{RESOURCE}/callback", {"track_hook": LOCAL_HOOK, "token": "a", "track_token": "b"}, "track_token"),
    (f"{RESOURCE}/callback", {"track_token": "a"}, "hook"), (f"{RESOURCE}/callback", {}, "hook"),
    (RESOURCE, {"track_token": "a"}, "track_hook"), (RESOURCE, {}, "track_hook"),
    (RESOURCE, {"hook": LOCAL_HOOK}, "hook"),  # the resource itself takes the tracker's spelling only
])
def test_a_bad_tracker_put_is_a_400_naming_the_parameter(api, resource, path, query, parameter):
    refused = write(api, "PUT", path, query_string=query)
    assert refused.status_code == 400 and refused.json["parameter"] == parameter


def test_a_put_on_the_resource_without_the_csrf_header_changes_nothing(api, resource):
    refused = api.open("PUT", f"{RESOURCE}?track_hook={LOCAL_HOOK}")
    assert refused.status_code == 403 and refused.json["parameter"] == "DCM-Request"
    assert api.get(RESOURCE).json["callback"] is None


# ---- issue 25's guards on the tracker's forms (production mode) --------------------------------------
def test_another_caller_sees_the_element_redacted_and_may_not_overwrite_it(prod, firestore):  # noqa: F811
    seed(firestore, "aws", "vm", "i-1", "RUNNING", "2026-04-01T10:00:00Z", "t1")
    created = prod.write("PUT", RESOURCE, ALICE, query_string={"track_hook": HOOK, "track_token": "TOK"})
    assert created.status_code == 201, created.get_data()
    mine = body(prod.open("GET", RESOURCE, ALICE))["callback"]
    assert mine["hook"] == HOOK and mine["token"] == "TOK" and not mine["redacted"]
    theirs = body(prod.open("GET", RESOURCE, BOB))["callback"]
    assert theirs["token"] is None and theirs["redacted"] and "SECRET" not in str(theirs)
    for query in ({"track_hook": "https://bob.example.com/x"}, {"track_hook": "none"}):
        refused = prod.write("PUT", RESOURCE, BOB, query_string=query)
        assert refused.status_code == 403 and body(refused)["parameter"] == "id"
    assert prod.write("PUT", RESOURCE, None, query_string={"track_hook": HOOK}).status_code == 401
    assert body(prod.open("GET", RESOURCE, ALICE))["callback"]["hook"] == HOOK
