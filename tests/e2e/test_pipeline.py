"""The pipeline end to end on the emulators: provider publish -> ingest -> upsert -> Firestore."""

from __future__ import annotations

import pytest

from shared import timeutil
from tests.e2e.conftest import wait_until

pytestmark = pytest.mark.e2e


def test_structured_and_binary_reports_land_in_firestore(e2e, uid):
    aws = e2e.reporter("aws")
    aws.report("vm", f"vm-{uid}", "RUNNING", "VM is running.").result(timeout=30)
    aws.report("container", f"ctr-{uid}", "Running", "binary mode", mode="binary").result(timeout=30)
    vm = e2e.wait_for_status(f"aws/vm/vm-{uid}", "RUNNING")
    ctr = e2e.wait_for_status(f"aws/container/ctr-{uid}", "RUNNING")
    assert vm["message"] == "VM is running." and vm["statusRecognized"]
    assert ctr["rawStatus"] == "Running"
