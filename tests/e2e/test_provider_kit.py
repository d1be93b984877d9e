"""The provider kit (sdk/) against the emulators: installed alone into a clean virtualenv it
publishes to the emulator, and a flapping resource reaches the platform in its final state
through a bounded number of updates."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from dcm_status_sdk import Reporter, ReporterConfig
from google.cloud.firestore_v1.base_query import FieldFilter

from infra.local.state import REPO_ROOT
from shared.state.documents import LEDGER
from tests import clean_venv
from tests.e2e.conftest import E2EStack, wait_until

CLEAN_SCRIPT = """
import importlib.metadata, importlib.resources, sys
from dcm_status_sdk import Reporter, ReporterConfig
import dcm_status_contracts, dcm_status_sdk
from dcm_status_contracts.errors import Rejected
from dcm_status_contracts.schemas import schemas_dir
shipped = importlib.resources.files("dcm_status_contracts") / "schemas"
assert (shipped / "vm" / "status-v1.json").is_file(), "the contracts ship the schemas the SDK checks with"
assert str(schemas_dir()) == str(shipped), "read as package data"
assert not (shipped / "samples").exists(), "the samples stay in the repository"
assert "site-packages" in dcm_status_contracts.__file__, "installed, not the repository's"
assert dcm_status_sdk.Rejected is Rejected, "one import identity"
assert not (importlib.resources.files("dcm_status_sdk") / "schemas").exists(), "the kit ships no copy"
installed = {d.metadata["Name"].lower() for d in importlib.metadata.distributions()}
assert "dcm-status-contracts" in installed
extra = installed & {"google-cloud-firestore", "functions-framework", "click", "rich", "dcm-status"}
assert not extra, f"a provider does not need {sorted(extra)}"
with Reporter(ReporterConfig(project=sys.argv[1], provider="aws")) as reporter:
    reporter.report("vm", sys.argv[2], "RUNNING", "reported from a clean virtualenv")
print("published")
"""


@pytest.mark.timeout(600)
def test_the_sdk_installs_alone_into_a_clean_virtualenv_and_publishes_to_the_emulator(e2e: E2EStack, uid: str,
                                                                                      tmp_path: Path):
    python = clean_venv.create(tmp_path / "venv")
    # the contracts from the local path (their own distribution, on no index), then the kit
    install = subprocess.run([*clean_venv.installer(python), "-q", str(REPO_ROOT / "shared" / "contracts"),
                              str(REPO_ROOT / "sdk")], capture_output=True, text=True, timeout=540)
    assert install.returncode == 0, install.stderr[-2000:]
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "DCM_SCHEMAS_DIR")}
    run = subprocess.run([str(python), "-c", textwrap.dedent(CLEAN_SCRIPT), e2e.project, f"clean-{uid}"],
                         cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120)  # not the repo's code
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.strip() == "published"
    stored = e2e.wait_for_status(f"aws/vm/clean-{uid}", "RUNNING")
    assert stored["eventSource"] == "dcm/providers/aws" and stored["message"] == "reported from a clean virtualenv"


def test_a_flapping_resource_is_stored_in_its_final_state_through_a_bounded_number_of_updates(e2e: E2EStack,
                                                                                                 uid: str):
    window = 0.25
    key = f"aws/vm/flap-{uid}"
    reporter = Reporter(ReporterConfig(project=e2e.project, provider="aws", debounce_seconds=window))
    reporter.report("vm", f"flap-{uid}", "RUNNING", "up")
    started = time.monotonic()
    for i in range(100):  # running -> error -> running within 50 ms, 100 times
        reporter.report("vm", f"flap-{uid}", "ERROR", f"flap {i}: error")
        time.sleep(0.005)
        reporter.report("vm", f"flap-{uid}", "RUNNING", f"flap {i}: running again")
        time.sleep(0.005)
    flapped = time.monotonic() - started
    reporter.close(timeout=30)
    stats = reporter.stats()
    assert stats.reported == 201 and stats.failed_attempts == 0
    assert stats.published <= flapped / window + 2  # at most one per window, plus the first and the last
    stored = wait_until(lambda: (d := e2e.resource(key)) and d["message"] == "flap 99: running again" and d, 30,
                        what="the last state stored")
    assert stored["status"] == "RUNNING"
    ledger = e2e.db.collection(LEDGER).where(filter=FieldFilter("key", "==", key))
    processed = wait_until(lambda: (n := len(list(ledger.stream()))) >= stats.published and n, 30,
                           what="every published update processed")
    assert processed == stats.published  # none lost, none added


def test_the_readme_provider_is_complete_and_reports_what_it_maps(e2e: E2EStack):
    example = (REPO_ROOT / "examples" / "provider.py").read_text()
    assert f"```python\n{example}```" in (REPO_ROOT / "README.md").read_text()  # the README shows all of it
    assert len(example.splitlines()) < 35
    # its own provider: its resync says "this is all I have", which would reconcile away other tests' aws vms
    run = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / "provider.py")], cwd=REPO_ROOT,
                         env={**os.environ, "POLLS": "1", "PROVIDER": "kubernetes"}, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 0, run.stderr[-2000:]
    assert e2e.wait_for_status("kubernetes/vm/vm-1", "RUNNING")["eventSource"] == "dcm/providers/kubernetes"
    failed = e2e.wait_for_status("kubernetes/vm/vm-2", "FAILED")  # terminated by a spot reclaim: a failure
    assert "Server.SpotInstanceTermination" in failed["reason"]


def test_the_readme_provider_without_its_topic_ends_with_one_line_saying_what_to_do(e2e: E2EStack, uid: str):
    """A new user's first run with a provider the stack does not have: Pub/Sub answers 404 Topic not found,
    which no retry can change. Not a minute of retries then a traceback: one line with the fix, exit 1."""
    provider = f"new-{uid}"  # no test adds it: the stack has no ingress topic for it
    run = subprocess.run([sys.executable, str(REPO_ROOT / "examples" / "provider.py")], cwd=REPO_ROOT,
                         env={**os.environ, "POLLS": "1", "PROVIDER": provider}, capture_output=True, text=True,
                         timeout=120)
    assert run.returncode == 1 and run.stdout == ""
    assert len(run.stderr.splitlines()) == 1, run.stderr[-2000:]  # no traceback, no retry warnings
    line = run.stderr.strip()
    assert line.startswith(f"error: provider {provider}: ") and "topic_not_found" in line
    assert f"'dcm-status provider add {provider}'" in line and "Terraform variable cloud_providers" in line
    assert e2e.resource(f"{provider}/vm/vm-1") is None


def _one_line_saying_add(result: subprocess.CompletedProcess, provider: str) -> None:
    assert result.returncode == 1, result.stderr[-2000:]
    last = result.stderr.strip().splitlines()[-1]
    assert "Traceback" not in result.stderr and last.startswith(f"Error: provider {provider}: "), result.stderr[-2000:]
    assert f"'dcm-status provider add {provider}'" in last and "Terraform variable cloud_providers" in last


def test_the_reference_providers_without_their_topic_end_with_one_line_saying_what_to_do(e2e: E2EStack, uid: str,
                                                                                          tmp_path: Path,
                                                                                          monkeypatch):
    import http.server
    import threading

    import boto3
    from moto.server import ThreadedMotoServer

    from infra.local.emulators import free_port
    from tests.unit.test_kubernetes_provider import FakeApiServer

    provider = f"new-{uid}"
    aws = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}
    monkeypatch.setenv("MOTO_EC2_LOAD_DEFAULT_AMIS", "false")  # moto's catalogue of public AMIs: none is read here
    port = free_port()
    moto = ThreadedMotoServer(ip_address="127.0.0.1", port=port)
    moto.start()
    try:
        endpoint = f"http://127.0.0.1:{port}"
        boto3.client("ec2", endpoint_url=endpoint, region_name="us-east-1", aws_access_key_id="testing",
                     aws_secret_access_key="testing").run_instances(ImageId="ami-12345678", MinCount=1, MaxCount=1)
        _one_line_saying_add(e2e.cli("provider", "run-aws", "--once", "--endpoint-url", endpoint, "--name", provider,
                                     check=False, env=aws), provider)
    finally:
        moto.stop()
    api = http.server.ThreadingHTTPServer(("127.0.0.1", 0), FakeApiServer)
    threading.Thread(target=api.serve_forever, daemon=True).start()
    try:
        (tmp_path / "token").write_text("t0ken")
        _one_line_saying_add(e2e.cli("provider", "run-kubernetes", "--api-url", f"http://127.0.0.1:{api.server_port}",
                                     "--token-file", str(tmp_path / "token"), "--once", "--name", provider,
                                     check=False), provider)
    finally:
        api.shutdown()
