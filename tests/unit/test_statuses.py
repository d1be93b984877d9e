"""Status enums per resource type, aliases and the UNKNOWN default."""

import pytest

from shared.contracts.schemas import registry
from shared.ingest.statuses import normalize

ENUMS = {
    "vm": {"PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "PAUSED", "DELETING", "DELETED", "FAILED"},
    "container": {"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "UNKNOWN"},
    "cluster": {"CREATING", "ACTIVE", "UPDATING", "DEGRADED", "DELETED", "FAILED"},
}


@pytest.mark.parametrize("rtype", ENUMS)
def test_enums_are_the_proposals(rtype):
    assert set(registry().current[rtype].statuses) == ENUMS[rtype]


def test_volume_and_network_include_the_proposals_examples():
    assert "RUNNING" in registry().current["volume"].statuses
    assert "ACTIVE" in registry().current["network"].statuses


@pytest.mark.parametrize("rtype,raw,status,recognized", [
    ("vm", "RUNNING", "RUNNING", True),
    ("vm", "Running", "RUNNING", True),
    ("vm", " stopped ", "STOPPED", True),
    ("vm", "ERROR", "FAILED", True),
    ("vm", "error", "FAILED", True),
    ("vm", "HIBERNATING", "UNKNOWN", False),
    ("container", "CrashLoopBackOff", "FAILED", True),
    ("container", "ContainerCreating", "PENDING", True),
    ("container", "Unknown", "UNKNOWN", True),
    ("cluster", "ACTIVE", "ACTIVE", True),
    ("cluster", "RUNNING", "ACTIVE", True),
    ("volume", "in-use", "RUNNING", True),
    ("network", "Available", "ACTIVE", True),
    ("network", "flapping", "UNKNOWN", False),
])
def test_normalize(rtype, raw, status, recognized):
    result = normalize(registry().current[rtype], raw)
    assert (result.status, result.recognized, result.raw) == (status, recognized, raw)
