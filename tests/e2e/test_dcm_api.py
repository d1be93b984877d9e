"""The DCM tools pointed at the local stack (issue 29): what the DCM CLI sends and decodes, replayed
against the running api, every answer validated against the upstream contract (tests/dcm_contract.py);
and the Deltacloud tracker's own ``track_hook`` / ``track_token`` through to a delivery.

The CLI replayed is dcm-project/cli at b80a859: ``internal/commands/sp_resource.go`` (``sp resource
list``: ``provider``, ``max_page_size``, ``page_token``, ``show_deleted``; it decodes ``{instances:
[map], next_page_token: string}`` and prints the columns ``id``, ``provider_name``, ``status``,
(``deletion_status``,) ``create_time``; ``sp resource get ID``), ``helpers.go`` (base URL +
``/api/v1alpha1``; a refusal is an RFC 7807 problem when its ``type`` is not empty) and
``internal/output/formatter.go`` (the next page is the same command with ``--page-token``).
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import requests
from openapi_core.contrib.requests import RequestsOpenAPIRequest, RequestsOpenAPIResponse

from infra.local.receiver import Receiver
from tests import dcm_contract
from tests.e2e.conftest import E2EStack, wait_until

LIST_COLUMNS = ("id", "provider_name", "status", "create_time")  # spResourceTableDef
DELETED_COLUMNS = ("id", "provider_name", "status", "deletion_status", "create_time")  # ...WithDeletedTableDef


def dcm_get(e2e: E2EStack, path: str, **params: Any) -> requests.Response:
    """One request as the CLI's generated client sends it, its answer checked against the upstream contract."""
    response = requests.get(e2e.api_url + f"api/v1alpha1/{path}", params=params, timeout=30)
    dcm_contract.check(f"/api/v1alpha1/{path}", response.status_code, response.json(),
                       RequestsOpenAPIRequest(response.request), RequestsOpenAPIResponse(response))
    return response


def row(instance: dict[str, Any], columns: tuple[str, ...]) -> list[str]:
    """stringifyValue: ``fmt.Sprintf("%v")`` of the value, "" when absent or null."""
    return ["" if instance.get(c) is None else str(instance[c]) for c in columns]


def cli_list(e2e: E2EStack, provider: str, page_size: int, show_deleted: bool = False) -> tuple[list[dict], int]:
    """``dcm sp resource list --provider P --page-size N [--show-deleted]``, then again with ``--page-token``
    for as long as it prints a next page."""
    found: list[dict[str, Any]] = []
    token, pages = "", 0
    while True:
        params: dict[str, Any] = {"max_page_size": page_size, "provider": provider}
        if token:
            params["page_token"] = token
        if show_deleted:
            params["show_deleted"] = "true"
        response = dcm_get(e2e, "service-type-instances", **params)
        assert response.status_code == 200, response.text
        body = response.json()  # struct{Instances []map[string]any; NextPageToken string}
        assert isinstance(body["instances"], list) and isinstance(body.get("next_page_token", ""), str)
        found += body["instances"]
        pages += 1
        token = body.get("next_page_token", "")
        if not token:
            return found, pages


def test_the_dcm_cli_lists_pages_and_gets_what_providers_reported(e2e, uid):
    ids = [f"dcm-{uid}-{n}" for n in range(3)]
    kubevirt = e2e.reporter("kubevirt")
    for rid in ids:
        kubevirt.publish_now("vm", rid, "RUNNING", "up", resource_specific={"cpus": 2}).result(timeout=30)
    kubevirt.publish_now("vm", ids[2], "DELETED", "gone", time="2099-01-01T00:00:00Z").result(timeout=30)
    e2e.wait_for_status(f"kubevirt/vm/{ids[2]}", "DELETED")
    for rid in ids[:2]:
        e2e.wait_for_status(f"kubevirt/vm/{rid}", "RUNNING")

    listed, pages = cli_list(e2e, "kubevirt", page_size=2)
    mine = {i["id"]: i for i in listed if i["id"] in ids}
    assert sorted(mine) == ids[:2] and len(listed) == len({i["id"] for i in listed}) and pages >= 2
    assert row(mine[ids[0]], LIST_COLUMNS)[:3] == [ids[0], "kubevirt", "running"]  # as the control-plane stores it
    assert mine[ids[0]]["spec"] == {"cpus": 2} and mine[ids[0]]["create_time"]

    with_deleted, _ = cli_list(e2e, "kubevirt", page_size=100, show_deleted=True)
    gone = next(i for i in with_deleted if i["id"] == ids[2])
    assert row(gone, DELETED_COLUMNS)[:4] == [ids[2], "kubevirt", "deleted", "DELETED"]

    got = dcm_get(e2e, f"service-type-instances/{quote(ids[0], safe='')}")  # url.PathEscape
    assert got.status_code == 200 and got.json() == mine[ids[0]]
    refused = dcm_get(e2e, f"service-type-instances/{quote(ids[2], safe='')}")
    assert refused.status_code == 404 and refused.json()["type"]  # the CLI formats it as a problem
    assert dcm_get(e2e, f"service-type-instances/{ids[2]}", show_deleted="true").json()["deletion_status"] == "DELETED"
    assert dcm_get(e2e, "health").json()["status"] == "ok"


def test_the_trackers_track_hook_registers_delivers_and_none_removes(e2e, uid):
    receiver = Receiver()
    try:
        path = e2e.api_url + f"v1/resources/aws/vm/trk-{uid}"
        put = requests.put(path, params={"track_hook": receiver.url("t"), "track_token": "ABCDEFG42"},
                           headers={"DCM-Request": "1"}, timeout=30)
        assert put.status_code == 201, put.text
        hook = receiver.hook("t", secret=put.json()["secret"])
        e2e.reporter("aws").publish_now("vm", f"trk-{uid}", "RUNNING", "up").result(timeout=30)
        delivered = wait_until(lambda: hook.bodies(), 30, what="the tracker's callback")
        assert delivered[0]["token"] == "ABCDEFG42" and all(r.verified for r in hook.got)
        element = requests.get(path, timeout=30).json()["callback"]
        assert element["hook"] == receiver.url("t") and element["token"] == "ABCDEFG42"
        removed = requests.put(path, params={"track_hook": "none"}, headers={"DCM-Request": "1"}, timeout=30)
        assert removed.status_code == 204
        assert requests.get(path, timeout=30).json()["callback"] is None
    finally:
        receiver.close()
        requests.put(e2e.api_url + f"v1/resources/aws/vm/trk-{uid}/callback", params={"hook": "none"},
                     headers={"DCM-Request": "1"}, timeout=30)
