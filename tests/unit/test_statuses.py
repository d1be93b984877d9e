"""Status enums per resource type, aliases and the UNKNOWN default."""

import pytest
from dcm_status_contracts.schemas import registry

from shared.ingest.statuses import normalize_status

# The current vocabularies (dcm-project/enhancements@ce144d4, service-provider-status-reporting.md).
ENUMS = {
    "vm": {"PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "PAUSED", "DELETING", "DELETED", "FAILED"},
    "container": {"PENDING", "RUNNING", "SUCCEEDED", "FAILED", "UNKNOWN", "DELETED"},
    "cluster": {"PROGRESSING", "ACTIVE", "DEGRADED", "UNAVAILABLE", "FAILED", "DELETING", "DELETED"},
    "storage": {"PROVISIONING", "RUNNING", "FAILED", "DELETING", "DELETED"},
}
# Every status of every version: the January proposal's, and each later enhancement's.
EVERY_VERSION = {
    "vm": ENUMS["vm"] | {"ERROR"},
    "container": ENUMS["container"],
    "cluster": ENUMS["cluster"] | {"CREATING", "UPDATING"},
    "storage": ENUMS["storage"],
    "volume": {"CREATING", "AVAILABLE", "RUNNING", "DEGRADED", "DELETING", "DELETED", "FAILED"},
    "network": {"PENDING", "READY", "DELETED", "CREATING", "ACTIVE", "DEGRADED", "DELETING", "FAILED"},
}


@pytest.mark.parametrize("rtype", ENUMS)
def test_current_enums_are_the_current_specs(rtype):
    assert set(registry().current[rtype].statuses) == ENUMS[rtype]


def test_network_v2_keeps_what_has_no_counterpart():
    assert {"PENDING", "READY", "DELETED"} <= set(registry().current["network"].statuses)


@pytest.mark.parametrize("rtype", EVERY_VERSION)
def test_every_status_of_every_version_is_recognised_in_the_current_vocabulary(rtype):
    current = registry().current[rtype]
    schema_statuses = {st for s in registry().status.values() if s.resource_type == rtype for st in s.statuses}
    assert schema_statuses <= EVERY_VERSION[rtype]
    for raw in EVERY_VERSION[rtype]:
        result = normalize_status(current, raw)
        assert result.recognized and result.status in current.statuses, (rtype, raw, result)


def test_a_removed_enum_value_is_a_major_version():
    """The proposal's rule: removing values from an enum is a new major schema version."""
    by_type: dict[str, list] = {}
    for s in registry().status.values():
        by_type.setdefault(s.resource_type, []).append(s)
    for versions in by_type.values():
        versions.sort(key=lambda s: s.version)
        for older, newer in zip(versions, versions[1:]):
            assert newer.version > older.version
            assert set(older.statuses) - set(newer.statuses), "a new major version must remove something"


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
    ("network", "Available", "READY", True),
    ("cluster", "CREATING", "PROGRESSING", True),
    ("cluster", "updating", "PROGRESSING", True),
    ("network", "flapping", "UNKNOWN", False),
])
def test_normalize(rtype, raw, status, recognized):
    result = normalize_status(registry().current[rtype], raw)
    assert (result.status, result.recognized, result.raw) == (status, recognized, raw)


@pytest.mark.parametrize("vocabulary, rtype, raw, status", [
    ("kubevirt", "vm", "Pending", "PROVISIONING"),
    ("kubevirt", "vm", "Scheduling", "PROVISIONING"),
    ("kubevirt", "vm", "Scheduled", "PROVISIONING"),
    ("kubevirt", "vm", "Running", "RUNNING"),
    ("kubevirt", "vm", "Succeeded", "STOPPED"),
    ("kubevirt", "vm", "Failed", "FAILED"),
    ("kubevirt", "vm", "Unknown", "UNKNOWN"),
    ("acm-cluster", "cluster", "READY", "ACTIVE"),
    ("acm-cluster", "cluster", "PENDING", "PROGRESSING"),
    ("acm-cluster", "cluster", "PROVISIONING", "PROGRESSING"),
    ("acm-cluster", "cluster", "UNAVAILABLE", "UNAVAILABLE"),
    ("acm-cluster", "cluster", "FAILED", "FAILED"),
    ("acm-cluster", "cluster", "DELETING", "DELETING"),
    ("acm-cluster", "cluster", "DELETED", "DELETED"),
])
def test_provider_vocabularies_map_raw_statuses_and_keep_them(vocabulary, rtype, raw, status):
    result = normalize_status(registry().current[rtype], raw, registry().vocabularies[vocabulary])
    assert (result.status, result.raw, result.recognized) == (status, raw, True)


def test_a_vocabulary_maps_only_its_own_resource_types():
    kubevirt = registry().vocabularies["kubevirt"]
    assert normalize_status(registry().current["container"], "Succeeded", kubevirt).status == "SUCCEEDED"
    assert normalize_status(registry().current["vm"], "Succeeded").status == "UNKNOWN"  # without it: not a vm status
