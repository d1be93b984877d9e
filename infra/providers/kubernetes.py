"""The Kubernetes reference provider, on the provider kit: pods (container) and KubeVirt
VirtualMachineInstances (vm) from the API server's list and watch.

List, then watch from the list's resourceVersion (the API's own protocol): the list is published
as one resync batch (the platform learns what disappeared while the bridge was away), each watch
event as a report when the mapped status changed. The ``kubernetes-pod`` and ``kubevirt-vmi``
mapping tables decide the status from the whole object (``dcm_status_sdk.kubernetes``). A watch
that expired (410 Gone) lists again. The resource id is the object's ``dcm.project/dcm-instance-id``
label, as the dcm-project providers set it, else ``{namespace}/{name}``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterator, Mapping

import orjson
import requests
from dcm_status_contracts import timeutil
from dcm_status_sdk import MappedStatus, MappingTable, Reporter, ResourceState
from dcm_status_sdk.kubernetes import kubevirt_inputs, pod_inputs

INSTANCE_LABEL = "dcm.project/dcm-instance-id"


@dataclass(frozen=True)
class WatchedKind:
    """A kind of object the bridge watches: where the API server lists it, and the kit's table that maps it."""

    path: str  # the collection on the API server
    resource_type: str
    table: str
    inputs: Callable[[Mapping[str, Any], bool], dict[str, Any]]  # (object, deleted) -> the table's inputs


def _vmi_inputs(vmi: Mapping[str, Any], deleted: bool) -> dict[str, Any]:
    # a VMI is the running instance of a VirtualMachine: it goes away when the VM stops, not when it is deleted
    return kubevirt_inputs(None, {"status": {"printableStatus": "Stopped"}}) if deleted else kubevirt_inputs(vmi)


KINDS = {
    "pods": WatchedKind("/api/v1/pods", "container", "kubernetes-pod", lambda obj, deleted: pod_inputs(obj, deleted)),
    "vmis": WatchedKind("/apis/kubevirt.io/v1/virtualmachineinstances", "vm", "kubevirt-vmi", _vmi_inputs),
}


class WatchExpired(Exception):
    """The resourceVersion watched from is gone (410): list again."""


def resource_id(obj: Mapping[str, Any]) -> str:
    meta = obj.get("metadata") or {}
    return (meta.get("labels") or {}).get(INSTANCE_LABEL) or f"{meta.get('namespace', '')}/{meta.get('name', '')}"


@dataclass
class KubernetesBridge:
    reporter: Reporter
    kind: WatchedKind
    table: MappingTable = field(init=False)
    last: dict[str, str] = field(default_factory=dict)  # resource id -> status last reported

    def __post_init__(self) -> None:
        self.table = MappingTable.load(self.kind.table)

    def observe(self, obj: Mapping[str, Any], deleted: bool = False) -> tuple[str, MappedStatus, dict[str, str]]:
        meta = obj.get("metadata") or {}
        labels = {"namespace": meta.get("namespace", ""), "name": meta.get("name", "")}
        node = (obj.get("spec") or {}).get("nodeName") or (obj.get("status") or {}).get("nodeName")
        if node:
            labels["node"] = node
        return resource_id(obj), self.table.map(**self.kind.inputs(obj, deleted)), labels

    def resync(self, items: list[Mapping[str, Any]], taken_at: str | None = None) -> int:
        """The whole list (made from ``taken_at`` on) as one resync batch; returns how many."""
        states = []
        for obj in items:
            rid, status, labels = self.observe(obj)
            states.append(ResourceState(self.kind.resource_type, rid, status, f"{self.kind.table}: {status.raw}",
                                        metadata=labels))
            self.last[rid] = status.status
        if states:
            self.reporter.resync(states, taken_at=taken_at, scope=[self.kind.resource_type])
        return len(states)

    def handle(self, event: Mapping[str, Any]) -> MappedStatus | None:
        """One watch event: report it when the mapped status changed; returns what was reported."""
        kind = event.get("type")
        obj = event.get("object") or {}
        if kind == "ERROR":
            if obj.get("code") == 410:
                raise WatchExpired(obj.get("message", "resourceVersion too old"))
            raise RuntimeError(f"watch error: {obj.get('message', obj)}")
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return None  # BOOKMARK
        rid, status, labels = self.observe(obj, deleted=kind == "DELETED")
        if self.last.get(rid) == status.status:
            return None
        self.reporter.report(self.kind.resource_type, rid, status, f"{self.kind.table}: {status.raw}",
                             metadata=labels)
        self.last[rid] = status.status
        if kind == "DELETED":
            self.last.pop(rid, None)
        return status


@dataclass
class ApiServer:
    """List and watch over plain HTTPS (a bearer token, the cluster's CA), as kubectl does."""

    url: str
    token: str | None = None
    ca: str | bool = True
    timeout: float = 30.0
    session: requests.Session = field(default_factory=requests.Session)

    def _get(self, path: str, **params: Any) -> requests.Response:
        headers = {"Authorization": f"Bearer {self.token}"} if self.token else {}
        response = self.session.get(self.url.rstrip("/") + path, params=params, headers=headers, verify=self.ca,
                                    stream=bool(params.get("watch")), timeout=(5, None if params.get("watch")
                                                                               else self.timeout))
        response.raise_for_status()
        return response

    def list(self, path: str) -> tuple[list[dict[str, Any]], str]:
        doc = self._get(path).json()
        return doc.get("items") or [], (doc.get("metadata") or {}).get("resourceVersion", "")

    def watch(self, path: str, resource_version: str) -> Iterator[dict[str, Any]]:
        with self._get(path, watch="true", resourceVersion=resource_version, allowWatchBookmarks="true") as r:
            for line in r.iter_lines():
                if line:
                    yield orjson.loads(line)


def run(bridge: KubernetesBridge, api: ApiServer, once: bool = False, rewatch: bool = True,
        on_report: Callable[[MappedStatus], None] | None = None) -> None:
    """List (a resync), then watch; a watch the server closes is resumed from the last version seen
    (``rewatch``), one that expired (410) lists again. ``once``: the list only."""
    started = timeutil.now_str()
    items, version = api.list(bridge.kind.path)
    bridge.resync(items, started)
    while not once:
        try:
            for event in api.watch(bridge.kind.path, version):
                reported = bridge.handle(event)
                version = ((event.get("object") or {}).get("metadata") or {}).get("resourceVersion") or version
                if reported and on_report:
                    on_report(reported)
        except WatchExpired:
            started = timeutil.now_str()
            items, version = api.list(bridge.kind.path)
            bridge.resync(items, started)
            continue
        if not rewatch:
            return
