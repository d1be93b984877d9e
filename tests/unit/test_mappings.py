"""The provider kit's mapping tables (sdk/dcm_status_sdk/mappings/, docs/mappings.md): every rule of
every table reachable, the proposal's rows, each ambiguity's decision, unknown states kept raw."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import orjson
import pytest
from dcm_status_contracts.schemas import registry, schemas_dir
from dcm_status_sdk.mapping import MappingTable

from infra.mappings_doc import TABLES, render

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "sdk" / "dcm_status_sdk" / "mappings"


def sample(cond: Any) -> Any:
    """A value the condition holds for."""
    if isinstance(cond, list):
        return sample(cond[0])
    if isinstance(cond, dict):
        (op, arg), = cond.items()
        return {"ne": arg + 1, "present": "SomeReason" if arg else None}.get(op) if op != "not" else "something-else"
    return None if cond == "*" else cond


RULES = [(name, i) for name in TABLES for i in range(len(MappingTable.load(name).rules))]


@pytest.mark.parametrize("name,index", RULES, ids=[f"{n}#{i}" for n, i in RULES])
def test_every_rule_is_reachable_by_an_input_it_names(name, index):
    """No rule is shadowed by an earlier one: an input made from its own conditions lands on it."""
    table = MappingTable.load(name)
    rule = table.rules[index]
    mapped = table.map(**{k: sample(c) for k, c in rule.when.items()})
    assert (mapped.rule, mapped.status, mapped.known) == (index, rule.status, True)


ROWS = {  # the proposal's tables, then each ambiguity it leaves and how it is decided
    "aws-ec2": [
        ({"state": "pending"}, "PROVISIONING"), ({"state": "running"}, "RUNNING"),
        ({"state": "stopped"}, "STOPPED"), ({"state": "shutting-down"}, "DELETING"),
        ({"state": "stopping"}, "STOPPING"),  # proposal: STOPPED and STOPPING
        ({"state": "terminated", "stateReason": "Client.UserInitiatedShutdown"}, "DELETED"),  # FAILED and DELETED
        ({"state": "terminated"}, "DELETED"),
        ({"state": "terminated", "stateReason": "Server.InternalError"}, "FAILED"),
        ({"state": "terminated", "stateReason": "Server.SpotInstanceTermination"}, "FAILED"),
        ({"state": "stopped", "stateReason": "Client.UserInitiatedHibernate"}, "STOPPED"),
    ],
    "azure-vm": [
        ({"provisioningState": "creating", "powerState": "starting"}, "PROVISIONING"),
        ({"provisioningState": "succeeded", "powerState": "running"}, "RUNNING"),
        ({"provisioningState": "succeeded", "powerState": "stopped"}, "STOPPED"),
        ({"provisioningState": "succeeded", "powerState": "deallocated"}, "STOPPED"),
        ({"provisioningState": "failed", "powerState": "running"}, "FAILED"),
        ({"provisioningState": "deleted"}, "DELETED"),
        ({"provisioningState": "deleting", "powerState": "running"}, "DELETING"),
        ({"provisioningState": "succeeded", "powerState": "stopping"}, "STOPPING"),
        ({"provisioningState": "succeeded", "powerState": "deallocating"}, "STOPPING"),
        ({"provisioningState": "updating", "powerState": "running"}, "RUNNING"),
        ({"powerState": "paused"}, "PAUSED"),
    ],
    "vmware-vm": [
        ({"powerState": "poweredOn"}, "RUNNING"), ({"powerState": "suspended"}, "PAUSED"),
        ({"powerState": "poweredOff", "task": "VirtualMachine.clone", "taskState": "running"}, "PROVISIONING"),
        ({"powerState": "poweredOff", "everPoweredOn": False}, "PROVISIONING"),  # PoweredOff: both readings
        ({"powerState": "poweredOff", "everPoweredOn": True}, "STOPPED"),
        ({"powerState": "poweredOff"}, "STOPPED"),
        ({"powerState": "poweredOff", "task": "Folder.createVm", "taskState": "error"}, "FAILED"),
        ({"powerState": "poweredOn", "task": "VirtualMachine.powerOn", "taskState": "error"}, "RUNNING"),
        ({"exists": False, "powerState": "poweredOn"}, "DELETED"),
        ({"powerState": "poweredOn", "task": "VirtualMachine.destroy", "taskState": "running"}, "DELETING"),
        ({"powerState": "poweredOn", "guestState": "shuttingDown"}, "STOPPING"),
    ],
    "kubernetes-pod": [
        ({"phase": "Pending"}, "PENDING"), ({"phase": "Pending", "waiting": "ContainerCreating"}, "PENDING"),
        ({"phase": "Pending", "waiting": "ImagePullBackOff"}, "PENDING"), ({"phase": "Running"}, "RUNNING"),
        ({"phase": "Succeeded", "terminated": "Completed", "exitCode": 0}, "SUCCEEDED"),
        ({"exitCode": 0, "terminated": "Completed"}, "SUCCEEDED"),  # Docker's Exited (0)
        ({"phase": "Failed"}, "FAILED"), ({"phase": "Running", "waiting": "CrashLoopBackOff"}, "FAILED"),
        ({"exitCode": 137, "terminated": "Error"}, "FAILED"),  # Exited (non-zero)
        ({"phase": "Unknown"}, "UNKNOWN"), ({"phase": "Running", "podReason": "NodeLost"}, "UNKNOWN"),
        ({"phase": "Running", "terminated": "OOMKilled", "exitCode": 137}, "FAILED"),
        ({"phase": "Failed", "podReason": "Evicted"}, "FAILED"),
        ({"phase": "Pending", "waiting": "InvalidImageName"}, "FAILED"),
        ({"phase": "Pending", "waiting": "CreateContainerConfigError"}, "PENDING"),
        ({"phase": "Running", "deleted": True}, "DELETED"),
        ({"phase": "running"}, "RUNNING"),  # a Docker container
    ],
    "kubevirt-vmi": [
        ({"phase": "Scheduling"}, "PROVISIONING"), ({"phase": "Running"}, "RUNNING"),
        ({"phase": "Succeeded"}, "STOPPED"), ({"phase": "Failed"}, "FAILED"),
        ({"phase": "Running", "printableStatus": "Paused"}, "PAUSED"),
        ({"phase": "Running", "printableStatus": "Migrating"}, "RUNNING"),
        ({"printableStatus": "Stopped"}, "STOPPED"), ({"printableStatus": "ErrorPvcNotFound"}, "FAILED"),
        ({"phase": "Pending", "printableStatus": "ErrImagePull"}, "PROVISIONING"),
        ({"phase": "Running", "printableStatus": "Terminating"}, "DELETING"),
    ],
    "kubernetes-cluster": [
        ({"available": "False", "everAvailable": False}, "PROGRESSING"),  # v1 CREATING
        ({"available": "True"}, "ACTIVE"),
        ({"available": "True", "progressing": True}, "PROGRESSING"),  # v1 UPDATING
        ({"available": "True", "degraded": "True"}, "DEGRADED"),
        ({"available": "False", "degraded": "True"}, "FAILED"),
        ({"available": "False", "everAvailable": True}, "UNAVAILABLE"),
        ({"available": "Unknown", "everAvailable": True}, "UNAVAILABLE"),
        ({"available": "True", "deleting": True}, "DELETING"), ({"deleted": True}, "DELETED"),
        ({"phase": "Provisioning"}, "PROGRESSING"), ({"phase": "Failed"}, "FAILED"),
    ],
    # issue 38: the environment-agent's container monitor (reconcile.go at 17d2e0d), kcli (kcli-sp.md at
    # 0f7e4e6), CloudNativePG (cloudnative-pg-sp.md at ce144d4)
    "kubernetes-deployment": [
        ({"podPhase": "Running"}, "RUNNING"), ({"podPhase": "Running", "progressDeadlineExceeded": True}, "FAILED"),
        ({"podPhase": None, "progressDeadlineExceeded": True}, "FAILED"),
        ({"podPhase": None, "replicaFailure": True, "replicas": 1}, "FAILED"),
        ({"podPhase": None, "replicas": 0}, "FAILED"),  # "deployment scaled to zero"
        ({"podPhase": None, "replicas": 1}, "PENDING"),  # "waiting for pods"
        ({"podPhase": "Pending", "replicas": 1}, "PENDING"), ({"podPhase": "Failed"}, "FAILED"),
        ({"deleted": True}, "DELETED"),
    ],
    "kcli-vm": [
        ({"state": "up"}, "RUNNING"), ({"state": "down", "recentlyCreated": True}, "PROVISIONING"),
        ({"state": "down", "recentlyCreated": False}, "STOPPED"), ({"state": "paused"}, "PAUSED"),
        ({"state": "error"}, "FAILED"), ({"state": "crashed"}, "FAILED"), ({"state": "nostate"}, "FAILED"),
        ({"state": "shuttingdown"}, "STOPPING"), ({"state": "up", "deleting": True}, "DELETING"),
        ({"exists": False}, "DELETED"), ({"state": "suspended"}, "PAUSED"),
    ],
    "cnpg-database": [
        ({"podPhase": "Pending"}, "PENDING"), ({"podPhase": "Running"}, "RUNNING"),
        ({"podPhase": "Failed"}, "FAILED"), ({"podPhase": "Pending", "pvcPhase": "Lost"}, "FAILED"),
        ({"podPhase": "Unknown"}, "UNKNOWN"), ({"podPhase": "Running", "podDeleting": True}, "PENDING"),
        ({"readyInstances": 0, "instances": 1}, "PENDING"), ({"instances": 0}, "FAILED"),
        ({"podPhase": "Running", "clusterDeleting": True}, "DELETING"), ({"clusterFound": False}, "DELETED"),
    ],
}
CASES = [(name, inputs, status) for name, rows in ROWS.items() for inputs, status in rows]


@pytest.mark.parametrize("name,inputs,status", CASES, ids=[f"{n}:{s}:{i}" for n, i, s in CASES])
def test_the_proposals_rows_and_each_decision(name, inputs, status):
    assert MappingTable.load(name).map(**inputs).status == status


@pytest.mark.parametrize("name", TABLES)
def test_an_unknown_raw_state_maps_to_the_conservative_default_and_keeps_the_raw_value(name):
    table = MappingTable.load(name)
    first = table.inputs[0]
    mapped = table.map(**{first: "hibernating-on-the-moon"})
    assert (mapped.status, mapped.known, mapped.rule) == ("UNKNOWN", False, None)
    assert mapped.raw.startswith("hibernating-on-the-moon")


def test_the_raw_value_carries_the_context_that_decided():
    mapped = MappingTable.load("aws-ec2").map(state="terminated", stateReason="Server.SpotInstanceTermination")
    assert mapped.raw == "terminated (stateReason=Server.SpotInstanceTermination)"


@pytest.mark.parametrize("name", TABLES)
def test_every_status_is_in_its_types_current_enum_and_every_decision_is_written_down(name):
    table = MappingTable.load(name)
    enum = set(registry().current[table.resource_type].statuses) | {"UNKNOWN"}
    assert {r.status for r in table.rules} <= enum
    assert table.doc["decisions"] and table.doc["sources"]


def test_every_shipped_table_is_documented_and_the_document_is_what_the_tables_say():
    assert sorted(p.stem for p in SHIPPED.glob("*.json")) == sorted(TABLES)
    assert (REPO / "docs" / "mappings.md").read_text() == render()  # python -m infra.mappings_doc


def test_the_kubevirt_table_agrees_with_the_server_side_vocabulary():
    vocabulary = orjson.loads((schemas_dir() / "vocabularies" / "kubevirt.json").read_bytes())["resourceTypes"]["vm"]
    table = MappingTable.load("kubevirt-vmi")
    phases = {p: s for p, s in vocabulary.items() if p not in ("Stopped", "Terminating")}  # printable statuses
    assert {p: table.map(phase=p).status for p in phases} == phases
    assert table.map(printableStatus="Stopped").status == vocabulary["Stopped"]
    assert table.map(printableStatus="Terminating").status == vocabulary["Terminating"]


def test_an_input_the_table_does_not_have_is_a_clear_error():
    with pytest.raises(ValueError, match="mapping aws-ec2 has no input.*'colour'.*its inputs: state, stateReason"):
        MappingTable.load("aws-ec2").map(state="running", colour="red")


def test_an_unknown_table_names_the_shipped_ones():
    with pytest.raises(ValueError, match="no mapping table 'gcp-vm'; shipped: aws-ec2, azure-vm"):
        MappingTable.load("gcp-vm")


BASE = {"mapping": "t", "resourceType": "vm", "inputs": {"state": ""}}


@pytest.mark.parametrize("doc,message", [
    ({**BASE, "rules": [{"when": {"colour": "red"}, "status": "RUNNING"}]}, "rule 0: input.*'colour'.*not declared"),
    ({**BASE, "rules": [{"when": {"state": "on"}, "status": "ACTIVE"}]}, "rule 0: status 'ACTIVE' is not in the vm enum"),
    ({**BASE, "rules": [{"when": {"state": {"gt": 1}}, "status": "RUNNING"}]}, "rule 0: a condition object is one of"),
    ({**BASE, "rules": [{"when": {"state": {"present": "yes"}}, "status": "RUNNING"}]}, "'present' takes true or false"),
    ({**BASE, "rules": [{"when": {"state": None}, "status": "RUNNING"}]}, "rule 0: None is not a condition"),
    ({**BASE, "resourceType": "toaster", "rules": []}, "unknown resource type 'toaster'"),
    ({**BASE, "rules": [], "default": "BROKEN"}, "default 'BROKEN' is not in the vm enum"),
])
def test_a_broken_table_is_refused_when_it_loads(doc, message):
    with pytest.raises(ValueError, match=message):
        MappingTable.from_dict(doc)


def test_conditions_compare_as_documented():
    table = MappingTable.from_dict({**BASE, "inputs": {"state": "", "code": "", "flag": ""}, "rules": [
        {"when": {"flag": True}, "status": "FAILED"},
        {"when": {"code": {"ne": 0}}, "status": "STOPPED"},
        {"when": {"state": {"not": ["on", "up"]}}, "status": "PAUSED"},
        {"when": {"state": "ON"}, "status": "RUNNING"},
    ]})
    assert table.map(state="on", flag="true").status == "RUNNING"  # a string is not the boolean true
    assert table.map(state="on", code=True).status == "RUNNING"  # a boolean is not a number
    assert table.map(state="on", code=3).status == "STOPPED"
    assert table.map(state="down").status == "PAUSED"
    assert table.map(state="On").status == "RUNNING"  # case forgiven
