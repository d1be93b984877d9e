"""The Kubernetes mapping tables on API objects (tests/fixtures/kubernetes/): the inputs read from a
whole object (sdk/dcm_status_sdk/kubernetes.py), then the status the table gives."""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from dcm_status_sdk.kubernetes import cluster_inputs, kubevirt_inputs, pod_inputs
from dcm_status_sdk.mapping import MappingTable

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"
PODS = {  # fixture: (status, what decided it)
    "pod-pending-containercreating": ("PENDING", {"waiting": "ContainerCreating"}),
    "pod-pending-errimagepull": ("PENDING", {"waiting": "ErrImagePull"}),
    "pod-pending-imagepullbackoff": ("PENDING", {"waiting": "ImagePullBackOff"}),
    "pod-pending-invalidimagename": ("FAILED", {"waiting": "InvalidImageName"}),
    "pod-pending-createcontainerconfigerror": ("PENDING", {"waiting": "CreateContainerConfigError"}),
    "pod-init-waiting": ("FAILED", {"waiting": "CrashLoopBackOff"}),  # the init container, before the app's
    "pod-running": ("RUNNING", {"phase": "Running"}),
    "pod-running-crashloopbackoff": ("FAILED", {"waiting": "CrashLoopBackOff"}),
    "pod-running-oomkilled": ("FAILED", {"terminated": "OOMKilled", "exitCode": 137}),
    "pod-succeeded-completed": ("SUCCEEDED", {"terminated": "Completed", "exitCode": 0}),
    "pod-failed-error": ("FAILED", {"terminated": "Error", "exitCode": 1}),
    "pod-failed-evicted": ("FAILED", {"podReason": "Evicted"}),
    "pod-running-terminating": ("RUNNING", {"phase": "Running"}),  # until the object is gone
    "pod-unknown-nodelost": ("UNKNOWN", {"podReason": "NodeLost"}),
}


def load(name: str) -> dict:
    return orjson.loads((FIXTURES / f"{name}.json").read_bytes())


def test_every_fixture_is_mapped_here():
    mapped = {*PODS, "vmi-running", "vmi-scheduling", "vm-paused", "managedcluster-available",
              "managedcluster-lease-lost"}
    assert {p.stem for p in FIXTURES.glob("*.json")} == mapped


@pytest.mark.parametrize("name", PODS)
def test_a_pod_object_maps_to_its_status(name):
    status, decided_by = PODS[name]
    inputs = pod_inputs(load(name))
    assert decided_by.items() <= inputs.items()
    mapped = MappingTable.load("kubernetes-pod").map(**inputs)
    assert (mapped.status, mapped.known) == (status, True)


def test_a_pod_gone_from_the_watch_is_deleted():
    assert MappingTable.load("kubernetes-pod").map(**pod_inputs(load("pod-running"), deleted=True)).status == "DELETED"


def test_a_pod_with_no_status_yet_is_unknown_not_a_guess():
    mapped = MappingTable.load("kubernetes-pod").map(**pod_inputs({"metadata": {"name": "new"}}))
    assert (mapped.status, mapped.known) == ("UNKNOWN", False)


@pytest.mark.parametrize("vmi,vm,status", [
    ("vmi-running", None, "RUNNING"),
    ("vmi-scheduling", None, "PROVISIONING"),
    ("vmi-running", "vm-paused", "PAUSED"),  # the VirtualMachine knows more than the VMI phase
    (None, None, "UNKNOWN"),
])
def test_kubevirt_objects_map_to_their_status(vmi, vm, status):
    inputs = kubevirt_inputs(load(vmi) if vmi else None, load(vm) if vm else None)
    assert MappingTable.load("kubevirt-vmi").map(**inputs).status == status


@pytest.mark.parametrize("name,status", [("managedcluster-available", "ACTIVE"),
                                         ("managedcluster-lease-lost", "UNAVAILABLE")])
def test_managed_cluster_objects_map_to_their_status(name, status):
    assert MappingTable.load("kubernetes-cluster").map(**cluster_inputs(load(name))).status == status


def test_a_hosted_cluster_being_created_upgraded_or_deleted():
    table = MappingTable.load("kubernetes-cluster")

    def hosted(available: str, history: list, **extra) -> dict:
        return {"metadata": extra, "status": {"conditions": [{"type": "Available", "status": available}],
                                              "version": {"history": history}}}
    assert table.map(**cluster_inputs(hosted("False", [{"state": "Partial"}]))).status == "PROGRESSING"
    upgrading = [{"state": "Partial"}, {"state": "Completed"}]
    assert table.map(**cluster_inputs(hosted("True", upgrading))).status == "PROGRESSING"
    assert table.map(**cluster_inputs(hosted("True", [{"state": "Completed"}]))).status == "ACTIVE"
    deleting = hosted("True", [{"state": "Completed"}], deletionTimestamp="2026-11-20T12:00:00Z")
    assert table.map(**cluster_inputs(deleting)).status == "DELETING"


# ---- a Deployment and its pod (the environment-agent's container monitor), a CloudNativePG Cluster -----------
def deployment(replicas: int = 1, progressing: tuple[str, str] | None = None, replica_failure: bool = False) -> dict:
    conditions = []
    if progressing:
        conditions.append({"type": "Progressing", "status": progressing[0], "reason": progressing[1],
                           "message": 'ReplicaSet "web-7d9" has timed out progressing.'})
    if replica_failure:
        conditions.append({"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate"})
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": {"name": "web"},
            "spec": {"replicas": replicas}, "status": {"conditions": conditions}}


def pod_in(phase: str) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "status": {"phase": phase}}


@pytest.mark.parametrize("deploy, pod, status", [
    (deployment(progressing=("False", "ProgressDeadlineExceeded")), pod_in("Pending"), "FAILED"),  # stalled rollout
    (deployment(progressing=("False", "ProgressDeadlineExceeded")), None, "FAILED"),
    (deployment(progressing=("True", "NewReplicaSetAvailable")), pod_in("Running"), "RUNNING"),
    (deployment(replica_failure=True), None, "FAILED"),
    (deployment(replicas=0), None, "FAILED"),  # "deployment scaled to zero"
    (deployment(), None, "PENDING"),  # "waiting for pods"
    (None, None, "DELETED"),
])
def test_the_deployment_table_on_objects_says_what_the_agents_monitor_says(deploy, pod, status):
    from dcm_status_sdk.kubernetes import deployment_inputs
    assert MappingTable.load("kubernetes-deployment").map(**deployment_inputs(deploy, pod)).status == status


@pytest.mark.parametrize("cluster, pod, pvc, status", [
    ({"status": {"instances": 1, "readyInstances": 1}}, pod_in("Running"), {"status": {"phase": "Bound"}}, "RUNNING"),
    ({"status": {"instances": 1, "readyInstances": 0}}, None, None, "PENDING"),
    ({"status": {"instances": 0}}, None, None, "FAILED"),
    ({"status": {"instances": 1}}, pod_in("Pending"), {"status": {"phase": "Lost"}}, "FAILED"),
    ({"metadata": {"deletionTimestamp": "2026-11-28T10:00:00Z"}, "status": {}}, pod_in("Running"), None, "DELETING"),
    (None, None, None, "DELETED"),
])
def test_the_cnpg_table_on_objects(cluster, pod, pvc, status):
    from dcm_status_sdk.kubernetes import cnpg_inputs
    assert MappingTable.load("cnpg-database").map(**cnpg_inputs(cluster, pod, pvc)).status == status
