"""The DCM control-plane's resource-manager read API (shared/api/dcm.py) through functions-framework's
test client, on the Firestore emulator: every answer validated against the upstream contract
(tests/dcm_contract.py: control-plane ``openapi.yaml`` at 1c577bc and 74967d8, ``health.go`` at 32ff3e8)."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import flask
import jsonschema
import orjson
import pytest
from dcm_status_contracts import tokens
from dcm_status_contracts.outputs import Redaction
from google.api_core import exceptions as gexc
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from openapi_core.contrib.werkzeug import WerkzeugOpenAPIRequest, WerkzeugOpenAPIResponse
from werkzeug.test import EnvironBuilder

from shared.api import dcm
from tests import dcm_contract
from tests.functional.test_api import seed
from tests.profile import examples


class Dcm:
    """The test client on the DCM routes: every answer validated against both upstream documents
    (a deleted instance's DELETED allowed), and every refusal a problem the DCM CLI reads as one."""

    def __init__(self, client):
        self.client = client

    def get(self, path: str, **kwargs: Any):
        response = self.client.get(path, **kwargs)
        sent = EnvironBuilder(path, method="GET", **kwargs).get_request()
        dcm_contract.check(path, response.status_code, response.get_json(force=True, silent=True),
                           WerkzeugOpenAPIRequest(sent), WerkzeugOpenAPIResponse(response))
        if response.status_code >= 400:
            assert response.mimetype == "application/problem+json"
        return response


@pytest.fixture
def api_dcm(api):
    return Dcm(api.client)


FLEET = [("kubevirt", "vm", "vm-1", "RUNNING", {"cpus": 2, "memoryMb": 4096}),
         ("kubevirt", "vm", "vm-2", "STOPPED", {"cpus": 1}),
         ("kubevirt", "vm", "vm-3", "DELETED", {}),
         ("kubevirt", "container", "c-1", "RUNNING", {}),
         ("osac", "vm", "123e4567-e89b-12d3-a456-426614174000", "PROVISIONING", {}),
         ("osac", "cluster", "k-1", "ACTIVE", {})]


@pytest.fixture
def fleet(firestore):
    for n, (provider, rtype, rid, status, specific) in enumerate(FLEET):
        seed(firestore, provider, rtype, rid, status, f"2026-04-01T10:00:0{n}Z", f"d{n}", specific or None)
    return FLEET


def every_page(api_dcm: Dcm, query: str = "") -> tuple[list[dict[str, Any]], int]:
    """The DCM CLI's paging: follow next_page_token until there is none."""
    found, token, pages = [], None, 0
    while True:
        body = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances?max_page_size=2{query}"
                           + (f"&page_token={token}" if token else "")).json
        found += body["instances"]
        pages += 1
        token = body.get("next_page_token")
        if not token:
            return found, pages


# ---- list --------------------------------------------------------------------------------------------
def test_the_list_pages_through_every_live_instance_once_in_the_upstream_shape(api_dcm, fleet):
    found, pages = every_page(api_dcm)
    live = [(p, t, i) for p, t, i, s, _ in fleet if s != "DELETED"]
    assert sorted((f["agent_name"], f["service_type"], f["id"]) for f in found) == sorted(live)
    assert pages >= 3
    vm1 = next(f for f in found if f["id"] == "vm-1")
    assert vm1["path"] == "service-type-instances/vm-1" and vm1["provider_name"] == "kubevirt"
    assert vm1["status"] == "running" and vm1["spec"] == {"cpus": 2, "memoryMb": 4096}
    assert vm1["key"] == "kubevirt/vm/vm-1" and "deletion_status" not in vm1
    assert vm1["create_time"] <= vm1["update_time"]


def test_show_deleted_adds_the_deleted_with_deletion_status_deleted(api_dcm, fleet):
    found, _ = every_page(api_dcm, "&show_deleted=true")
    assert len(found) == len(fleet)
    gone = next(f for f in found if f["id"] == "vm-3")
    assert gone["deletion_status"] == "DELETED" and gone["status"] == "deleted"


def test_filters_by_service_type_and_agent_name_or_the_older_provider(api_dcm, fleet):
    def ids(query: str) -> list[str]:
        listed = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances?{query}").json["instances"]
        return sorted(i["id"] for i in listed)

    assert ids("service_type=vm&agent_name=kubevirt") == ["vm-1", "vm-2"]
    assert ids("service_type=vm&provider=kubevirt") == ["vm-1", "vm-2"]
    assert ids("agent_name=osac&provider=osac") == ["123e4567-e89b-12d3-a456-426614174000", "k-1"]
    assert ids("service_type=database") == []
    assert ids("agent_name=&service_type=%20&page_token=") == ids("")  # blank is no filter, as upstream has it


def test_status_is_the_control_planes_by_default_and_this_platforms_upper_case_when_asked(api_dcm, fleet):
    """dcm-project/control-plane ``internal/sp/consumer/consumer.go`` at feead82 stores
    ``strings.ToLower(strings.TrimSpace(status))`` of what the provider sent; ``status_case=upper`` keeps
    the spelling served before (this platform's status on its type's vocabulary)."""
    base = f"{dcm.PATH_PREFIX}/service-type-instances/vm-1"
    assert api_dcm.get(base).json["status"] == "running"
    assert api_dcm.get(f"{base}?status_case=lower").json["status"] == "running"
    assert api_dcm.get(f"{base}?status_case=upper").json["status"] == "RUNNING"
    listed = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances?status_case=upper").json["instances"]
    assert {i["status"] for i in listed} == {"RUNNING", "STOPPED", "PROVISIONING", "ACTIVE"}


def test_a_value_outside_the_vocabulary_is_passed_through_lower_cased_and_unknown_when_upper(api_dcm, firestore):
    """The upstream e2e suite's "passes through arbitrary status values" (utilities
    ``tests/e2e/api_status_reader_test.go``, the newest version read): CUSTOM_STATE_12345 -> custom_state_12345."""
    seed(firestore, "k8s-container", "container", "c-custom", "  CUSTOM_STATE_12345 ", "2026-04-01T10:00:00Z", "z1")
    path = f"{dcm.PATH_PREFIX}/service-type-instances/c-custom"
    assert api_dcm.get(path).json["status"] == "custom_state_12345"
    assert api_dcm.get(f"{path}?status_case=upper").json["status"] == "UNKNOWN"
    kubevirt_raw = "Scheduling"  # a provider's own word is the control-plane's too: "scheduling"
    seed(firestore, "kubevirt", "vm", "vm-raw", kubevirt_raw, "2026-04-01T10:00:00Z", "z2")
    instance = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances/vm-raw").json
    assert instance["status"] == "scheduling"


def test_outputs_stored_on_the_resource_show_on_the_instance(api_dcm, fleet, firestore):
    """Part 2 of issue 29 stores them as the resource's top-level ``output_spec`` and ``outputs``."""
    ref = firestore.collection("resources").document("kubevirt~vm~vm-1")
    ref.update({"output_spec": {"host": "10.0.0.5"}, "outputs": {"port": 5432}})
    shown = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances/vm-1").json
    assert shown["output_spec"] == {"host": "10.0.0.5"} and shown["outputs"] == {"port": 5432}
    assert "outputs" not in api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances/vm-2").json


def test_outputs_on_an_instance_are_redacted_as_on_v1(api_dcm, fleet, firestore):
    """The redaction list (DCM_OUTPUT_REDACT, by default credential names and a URL's password: item 13 of
    docs/security.md) holds on the DCM routes too: one instance and the list."""
    ref = firestore.collection("resources").document("kubevirt~vm~vm-1")
    ref.update({"output_spec": {"host": "10.0.0.5", "password": "s3cret",
                                "url": "postgres://app:pw@db:5432/x"}, "outputs": {"token": "t0k"}})
    shown = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances/vm-1").json
    listed = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances?agent_name=kubevirt").json["instances"]
    for instance in (shown, next(i for i in listed if i["id"] == "vm-1")):
        assert instance["output_spec"]["host"] == "10.0.0.5"
        assert "s3cret" not in orjson.dumps(instance).decode() and ":pw@" not in instance["output_spec"]["url"]
        assert "t0k" not in orjson.dumps(instance).decode()


# ---- get ---------------------------------------------------------------------------------------------
def test_every_listed_id_gets_the_same_instance(api_dcm, fleet):
    found, _ = every_page(api_dcm, "&show_deleted=true")
    for listed in found:
        got = api_dcm.get(f"{dcm.PATH_PREFIX}/{listed['path']}?show_deleted=true").json
        assert got == listed


def test_a_deleted_instance_is_a_404_unless_show_deleted(api_dcm, fleet):
    path = f"{dcm.PATH_PREFIX}/service-type-instances/vm-3"
    refused = api_dcm.get(path)
    assert refused.status_code == 404 and "show_deleted" in refused.json["detail"]
    assert api_dcm.get(f"{path}?show_deleted=true").json["deletion_status"] == "DELETED"
    assert api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances/nope").status_code == 404


def test_an_id_outside_dcms_pattern_round_trips_percent_encoded(api, firestore):
    """Not a DCM instance id (upper case, a slash): served as it is, so not valid against the documents'
    id pattern; it still round-trips."""
    seed(firestore, "aws", "volume", "Vol/0ABC", "AVAILABLE", "2026-04-01T10:00:00Z", "x1")
    listed = api.client.get(f"{dcm.PATH_PREFIX}/service-type-instances?agent_name=aws").json["instances"]
    assert [i["path"] for i in listed] == ["service-type-instances/Vol%2F0ABC"]
    got = api.client.get(f"{dcm.PATH_PREFIX}/{listed[0]['path']}")
    assert got.status_code == 200 and got.json == listed[0]


def test_an_id_two_providers_hold_is_a_409_and_agent_name_picks_one(api_dcm, firestore):
    seed(firestore, "kubevirt", "vm", "vm-9", "RUNNING", "2026-04-01T10:00:00Z", "y1")
    seed(firestore, "osac", "vm", "vm-9", "STOPPED", "2026-04-01T10:00:01Z", "y2")
    path = f"{dcm.PATH_PREFIX}/service-type-instances/vm-9"
    both = api_dcm.get(path)
    assert both.status_code == 409 and "agent_name" in both.json["detail"]
    assert api_dcm.get(f"{path}?agent_name=osac").json["status"] == "stopped"
    assert api_dcm.get(f"{path}?provider=kubevirt").json["status"] == "running"


# ---- health ------------------------------------------------------------------------------------------
def test_health_says_ok_while_the_state_store_answers(api_dcm, firestore):
    answer = api_dcm.get(dcm.HEALTH_PATH)
    assert answer.status_code == 200
    assert answer.json == {"status": "ok", "path": "/api/v1alpha1/health", "checks": {"firestore": "ok"}}


class Unreachable:
    """A Firestore client whose every read fails as an outage does."""

    def collection(self, name):
        return self

    def document(self, name):
        return self

    def get(self, **kwargs):
        raise gexc.ServiceUnavailable("down")


def test_health_is_a_503_unhealthy_when_the_state_store_does_not_answer():
    answer = dcm.DcmApi(Unreachable(), {}, lambda body: flask.Response(orjson.dumps(body)), Redaction.default())
    response = answer(flask.Request(EnvironBuilder(dcm.HEALTH_PATH).get_environ()))
    assert response.status_code == 503
    body = orjson.loads(response.get_data())
    jsonschema.validate(body, dcm_contract.HEALTH)
    assert body["status"] == "unhealthy" and body["checks"] == {"firestore": "unavailable"}


# ---- refusals ----------------------------------------------------------------------------------------
@pytest.mark.parametrize("query, parameter", [
    ("max_page_size=0", "max_page_size"), ("max_page_size=101", "max_page_size"),
    ("max_page_size=ten", "max_page_size"), ("show_deleted=yes", "show_deleted"),
    ("page_token=bm90LWEtdG9rZW4", "page_token"), ("page_token=" + tokens.to_token(["key", "__x__"]), "page_token"),
    ("status_case=title", "status_case"), ("agent_name=a&provider=b", "provider"), ("colour=red", "colour"),
    ("agent_name=a&agent_name=b", "agent_name"), ("service_type=" + "x" * 257, "service_type"),
])
def test_a_bad_parameter_is_a_400_problem_naming_it(api_dcm, fleet, query, parameter):
    refused = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances?{query}")
    assert refused.status_code == 400 and refused.json["parameter"] == parameter


def test_an_unknown_path_or_a_write_is_refused_as_a_problem(api):
    assert api.client.get(f"{dcm.PATH_PREFIX}/catalog-items").status_code == 404
    deleted = api.client.delete(f"{dcm.PATH_PREFIX}/service-type-instances/vm-1", headers={"DCM-Request": "1"})
    assert deleted.status_code == 405 and deleted.mimetype == "application/problem+json"


text = st.text(st.characters(codec="utf-8"), max_size=80)
PARAMETERS = dcm.LIST_PARAMETERS + ("colour",)


@settings(max_examples=examples(60), deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=st.dictionaries(st.sampled_from(PARAMETERS), text, max_size=4), raw_id=text,
       parts=st.lists(st.one_of(text, st.sampled_from(["key", "a/b", "__x__", "."])), max_size=3))
def test_fuzzed_parameters_ids_and_page_tokens_never_answer_500(api, query, raw_id, parts):
    listed = api.client.get(f"{dcm.PATH_PREFIX}/service-type-instances", query_string=query)
    assert listed.status_code in (200, 400), (query, listed.get_data())
    token = api.client.get(f"{dcm.PATH_PREFIX}/service-type-instances",
                           query_string={"page_token": tokens.to_token(parts)})
    assert token.status_code in (200, 400), parts
    got = api.client.get(f"{dcm.PATH_PREFIX}/service-type-instances/{quote(raw_id or 'x', safe='')}",
                         query_string={k: v for k, v in query.items() if k in dcm.GET_PARAMETERS})
    assert got.status_code in (200, 400, 404, 409), (raw_id, got.get_data())


# ---- the DCM CLI at its newest version (issue 38 item 5) --------------------------------------------------
# dcm-project/cli internal/auth/transport.go at 175995824ff8df7a1f43f85a52d116d3eaaceaa0: a static token
# (DCM_TOKEN or --token) goes on every request as "Authorization: Bearer <token>", with no refresh; a stored
# OIDC token likewise once refreshed. The newest `sp resource list --agent-name NAME` sends agent_name=NAME
# (the control-plane's openapi.yaml at 1c577bc names the parameter; the CLI's files read here, sp_resource.go
# at 7f33bca and 131cee8, still send provider=) and shows the instances' agent_name.
CLI_HEADERS = {"User-Agent": "Go-http-client/1.1", "Accept-Encoding": "gzip"}
UNVERIFIABLE = "Bearer eyJhbGciOiJSUzI1NiJ9.eyJzdWIiOiJkY20tdXNlciIsImVtYWlsIjoiZGV2QGV4YW1wbGUuY29tIn0.c2lnbmF0dXJl"


def test_the_newest_clis_agent_name_list_with_a_bearer_token_reads_as_without_one(api_dcm, fleet):
    """A read with a token the api cannot verify is answered as a read without identity: the same 200 and
    the same body. It holds whether the api ignores the token (reads need no identity today) or verifies it
    and, failing, reads on without one (issue 37's identity verification): never a 401 on a read."""
    path = f"{dcm.PATH_PREFIX}/service-type-instances?agent_name=kubevirt&max_page_size=100"
    plain = api_dcm.get(path, headers=CLI_HEADERS)
    with_token = api_dcm.get(path, headers={**CLI_HEADERS, "Authorization": UNVERIFIABLE})
    assert plain.status_code == with_token.status_code == 200
    assert with_token.json == plain.json
    shown = with_token.json["instances"]
    assert sorted(i["id"] for i in shown) == ["c-1", "vm-1", "vm-2"]  # kubevirt's live ones, nobody else's
    assert {i["agent_name"] for i in shown} == {"kubevirt"}  # the column the newest CLI shows


@pytest.mark.parametrize("authorization", [UNVERIFIABLE, "Bearer not-a-jwt", "Bearer ", "Basic ZGNtOmRjbQ=="])
def test_a_get_with_any_authorization_is_the_same_read(api_dcm, fleet, authorization):
    path = f"{dcm.PATH_PREFIX}/service-type-instances/vm-1"
    assert api_dcm.get(path, headers={**CLI_HEADERS, "Authorization": authorization}).json == \
        api_dcm.get(path, headers=CLI_HEADERS).json


def test_a_database_reads_as_the_control_plane_stores_it(api_dcm, firestore):
    """The new database type (CloudNativePG): listed by service_type=database, its status the provider's."""
    seed(firestore, "cnpg-database", "database", "abc-123", "RUNNING", "2026-11-28T10:02:00Z", "db1")
    seed(firestore, "cnpg-database", "database", "abc-124", "DELETING", "2026-11-28T10:02:01Z", "db2")
    shown = api_dcm.get(f"{dcm.PATH_PREFIX}/service-type-instances?service_type=database").json["instances"]
    assert {(i["id"], i["status"], i["agent_name"]) for i in shown} == \
        {("abc-123", "running", "cnpg-database"), ("abc-124", "deleting", "cnpg-database")}
