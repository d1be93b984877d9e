"""The inputs of the Kubernetes mapping tables, read from API objects as ``kubectl get -o json``
prints them (and a watch stream delivers them).

    table = MappingTable.load("kubernetes-pod")
    status = table.map(**pod_inputs(pod))
"""

from __future__ import annotations

from typing import Any, Mapping


def _conditions(obj: Mapping[str, Any]) -> dict[str, str]:
    return {c.get("type", ""): c.get("status", "") for c in (obj.get("status") or {}).get("conditions") or []}


def pod_inputs(pod: Mapping[str, Any], deleted: bool = False) -> dict[str, Any]:
    """``kubernetes-pod`` inputs of a v1 Pod: ``status.phase`` and ``status.reason``; the first container
    (init containers first) whose ``state.waiting`` is set gives ``waiting``; when none waits, the first
    whose ``state.terminated`` is set gives ``terminated`` and ``exitCode``. ``deleted``: the object is
    gone (a watch DELETED event); given only when true."""
    status = pod.get("status") or {}
    containers = [*(status.get("initContainerStatuses") or []), *(status.get("containerStatuses") or [])]
    states = [c.get("state") or {} for c in containers]
    waiting = next((s["waiting"] for s in states if s.get("waiting")), None)
    terminated = None if waiting else next((s["terminated"] for s in states if s.get("terminated")), None)
    inputs: dict[str, Any] = {"phase": status.get("phase"), "podReason": status.get("reason")}
    if deleted:
        inputs["deleted"] = True
    if waiting:
        inputs["waiting"] = waiting.get("reason")
    if terminated:
        inputs["terminated"] = terminated.get("reason")
        inputs["exitCode"] = terminated.get("exitCode")
    return inputs


def kubevirt_inputs(vmi: Mapping[str, Any] | None = None, vm: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``kubevirt-vmi`` inputs: the VirtualMachineInstance's ``status.phase`` and the VirtualMachine's
    ``status.printableStatus`` (either may be missing: a stopped VM has no VMI)."""
    return {"phase": ((vmi or {}).get("status") or {}).get("phase"),
            "printableStatus": ((vm or {}).get("status") or {}).get("printableStatus")}


AVAILABLE = ("ManagedClusterConditionAvailable", "Available", "Ready")  # ACM, HyperShift, Cluster API


def cluster_inputs(cluster: Mapping[str, Any], deleted: bool = False) -> dict[str, Any]:
    """``kubernetes-cluster`` inputs of an ACM ManagedCluster, a HyperShift HostedCluster or a Cluster API
    Cluster: the availability condition (the first of ``AVAILABLE`` present), ``Degraded``, ``Progressing``,
    ``status.phase``, ``metadata.deletionTimestamp``. ``everAvailable`` is true when the cluster joined
    the hub (``ManagedClusterJoined``), completed a version rollout (``status.version.history``) or its
    control plane is initialized (``ControlPlaneInitialized``); None when nothing says."""
    conditions = _conditions(cluster)
    status = cluster.get("status") or {}
    available = next((conditions[c] for c in AVAILABLE if c in conditions), None)
    history = (status.get("version") or {}).get("history") or []
    rolling = any(h.get("state") == "Partial" for h in history)
    ever = conditions.get("ManagedClusterJoined") == "True" or conditions.get("ControlPlaneInitialized") == "True" \
        or any(h.get("state") == "Completed" for h in history) or available == "True"
    flags = {"deleted": deleted, "deleting": bool((cluster.get("metadata") or {}).get("deletionTimestamp")),
             "progressing": conditions.get("Progressing") == "True" or rolling}
    return {"available": available, "phase": status.get("phase"), "degraded": conditions.get("Degraded"),
            "everAvailable": True if ever else (False if available is not None or history else None),
            **{k: True for k, v in flags.items() if v}}  # a flag is said only when it holds: the raw value stays short


def _condition(obj: Mapping[str, Any], kind: str) -> Mapping[str, Any]:
    return next((c for c in (obj.get("status") or {}).get("conditions") or [] if c.get("type") == kind), {})


def deployment_inputs(deployment: Mapping[str, Any] | None, pod: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``kubernetes-deployment`` inputs of an apps/v1 Deployment and its pod (either may be gone):
    the pod's ``status.phase``; ``progressDeadlineExceeded`` (Progressing False, reason
    ProgressDeadlineExceeded), ``replicaFailure`` (ReplicaFailure True) and ``spec.replicas``; ``deleted``
    when neither exists. A flag is given only when it holds."""
    if deployment is None and pod is None:
        return {"deleted": True}
    inputs: dict[str, Any] = {"podPhase": ((pod or {}).get("status") or {}).get("phase")}
    if deployment is not None:
        progressing = _condition(deployment, "Progressing")
        if progressing.get("status") == "False" and progressing.get("reason") == "ProgressDeadlineExceeded":
            inputs["progressDeadlineExceeded"] = True
        if _condition(deployment, "ReplicaFailure").get("status") == "True":
            inputs["replicaFailure"] = True
        replicas = (deployment.get("spec") or {}).get("replicas")
        if isinstance(replicas, int):
            inputs["replicas"] = replicas
    return inputs


def cnpg_inputs(cluster: Mapping[str, Any] | None, pod: Mapping[str, Any] | None = None,
                pvc: Mapping[str, Any] | None = None) -> dict[str, Any]:
    """``cnpg-database`` inputs of a CloudNativePG ``Cluster`` (postgresql.cnpg.io/v1), its primary Pod and
    that Pod's PersistentVolumeClaim (each may be missing)."""
    def deleting(obj: Mapping[str, Any] | None) -> bool:
        return bool(((obj or {}).get("metadata") or {}).get("deletionTimestamp"))

    status = (cluster or {}).get("status") or {}
    inputs: dict[str, Any] = {"podPhase": ((pod or {}).get("status") or {}).get("phase"),
                              "pvcPhase": ((pvc or {}).get("status") or {}).get("phase"),
                              "instances": status.get("instances"), "readyInstances": status.get("readyInstances")}
    if cluster is None:
        inputs["clusterFound"] = False
    if deleting(cluster):
        inputs["clusterDeleting"] = True
    elif deleting(pod) or deleting(pvc):
        inputs["podDeleting"] = True
    return {k: v for k, v in inputs.items() if v is not None}
