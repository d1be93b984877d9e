"""The Kubernetes reference provider (infra/providers/kubernetes.py) on the provider kit: a watch stream
of the recorded objects in tests/fixtures/kubernetes/, and list + watch against a local API server."""

from __future__ import annotations

import http.server
import threading
from pathlib import Path
from typing import Iterator

import orjson
import pytest
from dcm_status_sdk import Reporter, ReporterConfig

from infra.providers.kubernetes import KINDS, ApiServer, KubernetesBridge, run
from tests.fakes import FakePublisher

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "kubernetes"


def obj(name: str) -> dict:
    return orjson.loads((FIXTURES / f"{name}.json").read_bytes())


@pytest.fixture
def kit() -> Iterator[tuple[Reporter, FakePublisher]]:
    publisher = FakePublisher()
    reporter = Reporter(ReporterConfig(project="p", provider="kubernetes", debounce_seconds=0), publisher=publisher)
    yield reporter, publisher
    reporter.close()


def statuses(reporter: Reporter, publisher: FakePublisher) -> list[tuple[str, str]]:
    reporter.flush(timeout=5)
    return [(e["data"]["id"], e["data"]["status"]) for e in publisher.events()]


def test_a_watch_stream_reports_each_change_of_status_once(kit):
    reporter, publisher = kit
    bridge = KubernetesBridge(reporter, KINDS["pods"])
    stream = [("ADDED", "pod-pending-containercreating"), ("MODIFIED", "pod-pending-imagepullbackoff"),
              ("MODIFIED", "pod-running"), ("MODIFIED", "pod-running"), ("BOOKMARK", "pod-running"),
              ("MODIFIED", "pod-running-crashloopbackoff"), ("MODIFIED", "pod-running-terminating"),
              ("DELETED", "pod-running-terminating")]
    for kind, name in stream:
        bridge.handle({"type": kind, "object": obj(name)})
        reporter.flush(timeout=5)  # each change on its own (the kit would coalesce a burst: the last state wins)
    assert statuses(reporter, publisher) == [("web-0001", s) for s in ("PENDING", "RUNNING", "FAILED", "RUNNING",
                                                                        "DELETED")]
    first = publisher.events()[0]
    assert first["data"]["metadata"] == {"namespace": "tenant-acme", "name": "web-7d9f8b6c5d-x2k9q",
                                         "node": "worker-1"}
    assert first["data"]["reason"] == "Pending (waiting=ContainerCreating)"  # the raw state, kept


def test_a_vmi_gone_is_a_stopped_vm_not_a_deleted_one(kit):
    reporter, publisher = kit
    bridge = KubernetesBridge(reporter, KINDS["vmis"])
    bridge.handle({"type": "ADDED", "object": obj("vmi-running")})
    reporter.flush(timeout=5)
    bridge.handle({"type": "DELETED", "object": obj("vmi-running")})
    vm_id = "c640a395-b625-444d-9aad-b6fda8c701f6"
    assert statuses(reporter, publisher) == [(vm_id, "RUNNING"), (vm_id, "STOPPED")]


def test_a_watch_error_is_raised_not_swallowed(kit):
    bridge = KubernetesBridge(kit[0], KINDS["pods"])
    with pytest.raises(RuntimeError, match="watch error: forbidden"):
        bridge.handle({"type": "ERROR", "object": {"kind": "Status", "code": 403, "message": "forbidden"}})


class FakeApiServer(http.server.BaseHTTPRequestHandler):
    """A list, then watch streams: the first expires (410), the second carries two changes and closes."""

    watches: list[str] = []

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        assert self.headers["Authorization"] == "Bearer t0ken"
        if "watch=true" not in self.path:
            body = {"kind": "PodList", "metadata": {"resourceVersion": "100"},
                    "items": [obj("pod-running"), {**obj("pod-failed-error"), "metadata": {
                        **obj("pod-failed-error")["metadata"], "labels": {"dcm.project/dcm-instance-id": "job-1"}}}]}
            self._send(orjson.dumps(body))
            return
        FakeApiServer.watches.append(self.path)
        if len(FakeApiServer.watches) == 1:
            lines = [{"type": "ERROR", "object": {"kind": "Status", "code": 410, "message": "too old"}}]
        else:
            running = obj("pod-running-crashloopbackoff")
            running["metadata"]["resourceVersion"] = "105"
            lines = [{"type": "MODIFIED", "object": running},
                     {"type": "DELETED", "object": {**running, "metadata": {**running["metadata"],
                                                                             "resourceVersion": "106"}}}]
        self._send(b"".join(orjson.dumps(line) + b"\n" for line in lines))

    def _send(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


def test_list_then_watch_against_an_api_server_resyncs_relists_on_410_and_reports_changes(kit):
    reporter, publisher = kit
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    FakeApiServer.watches = []
    reported = []
    try:
        run(KubernetesBridge(reporter, KINDS["pods"]), ApiServer(f"http://127.0.0.1:{server.server_port}", "t0ken"),
            rewatch=False, on_report=lambda status: reported.append(status.status))
    finally:
        server.shutdown()
    reporter.flush(timeout=5)
    assert len(FakeApiServer.watches) == 2 and "resourceVersion=100" in FakeApiServer.watches[1]
    events = publisher.events()
    batches = {e["resyncid"] for e in events if "resyncid" in e}
    assert len(batches) == 2 and {e["resynctotal"] for e in events if "resyncid" in e} == {2}  # listed twice
    assert reported == ["FAILED", "DELETED"]
    live = [(e["data"]["id"], e["data"]["status"]) for e in events if "resyncid" not in e]
    assert live[-1] == ("web-0001", "DELETED")  # the kit may coalesce the two: the last state wins
