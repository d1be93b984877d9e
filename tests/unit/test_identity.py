"""Resource identity from the subject hierarchy, table-driven."""

import pytest
from dcm_status_contracts.errors import Reason, Rejected
from dcm_status_contracts.identity import resolve

CASES = [
    # (attributes, data, expected key)
    ({"type": "dcm.providers.aws.vm.instances.i-1.status", "source": "x"}, {}, "aws/vm/i-1"),
    ({"type": "dcm.providers.aws.vm.i-1.status", "source": "x"}, {}, "aws/vm/i-1"),
    ({"type": "dcm.providers.aws.vm.instances.host.example.com.status", "source": "x"}, {}, "aws/vm/host.example.com"),
    ({"type": "dcm.providers.provider-a.volume.volume-123.status", "source": "x"}, {}, "provider-a/volume/volume-123"),
    ({"type": "dcm.providers.k8s.cluster.instances.status", "source": "x"}, {}, "k8s/cluster/instances"),
    ({"type": "dcm.status.vm", "source": "dcm/providers/azure", "subject": "vm-1"}, {}, "azure/vm/vm-1"),
    ({"type": "dcm.status.vm", "source": "dcm/providers/azure/westeurope", "subject": "vm-1"}, {}, "azure/vm/vm-1"),
    ({"type": "dcm.status.network", "source": "dcm/providers/azure"}, {"id": "n-1"}, "azure/network/n-1"),
    ({"type": "dcm.status.vm", "source": "dcm/providers/azure", "subject": "s"}, {"id": "d"}, "azure/vm/d"),
    ({"type": "dcm.status.vm", "source": "dcm/providers/azure", "subject": "dcm.vm"}, {"id": "d"}, "azure/vm/d"),
    ({"type": "dcm.providers.aws.vm.i-1.status", "source": "x", "resourcetype": "vm"}, {}, "aws/vm/i-1"),
]

BAD = [
    ({"type": "com.example.changed", "source": "x"}, {}, "type"),
    ({"type": "dcm.providers.aws.vm.status", "source": "x"}, {}, "type"),
    ({"type": "dcm.providers.AWS.vm.i-1.status", "source": "x"}, {}, "provider"),
    ({"type": "dcm.status.vm", "source": "aws-prod", "subject": "a"}, {}, "source"),
    ({"type": "dcm.status.vm", "source": "dcm/providers/aws"}, {}, "data.id"),
    ({"type": "dcm.status.vm", "source": "dcm/providers/aws", "subject": "dcm.vm"}, {}, "data.id"),
    ({"type": "dcm.providers.aws.vm.i-1.status", "source": "x", "resourcetype": "volume"}, {}, "resourcetype"),
    ({"type": "dcm.providers.aws.vm." + "x" * 600 + ".status", "source": "x"}, {}, "id"),
]


@pytest.mark.parametrize("attrs,data,expected", CASES)
def test_resolves(attrs, data, expected):
    assert str(resolve(attrs, data)) == expected


@pytest.mark.parametrize("attrs,data,attribute", BAD)
def test_rejects_with_the_offending_attribute(attrs, data, attribute):
    with pytest.raises(Rejected) as info:
        resolve(attrs, data)
    assert info.value.reason is Reason.INVALID_IDENTITY
    assert info.value.detail["attribute"] == attribute


@pytest.mark.parametrize("attrs, data, topic_provider, expected", [
    # the provider is the ingress topic's; source is only recorded (KubeVirt's is kubevirt.localhost)
    ({"type": "dcm.status.vm", "source": "kubevirt.localhost", "subject": "dcm.vm"}, {"id": "u-1"}, "kubevirt",
     "kubevirt/vm/u-1"),
    ({"type": "dcm.status.cluster", "source": "dcm/providers/acm-cluster-sp", "subject": "dcm.cluster"},
     {"id": "c-1"}, "acm-cluster", "acm-cluster/cluster/c-1"),
    ({"type": "dcm.status.container", "source": "dcm/providers/three-tier-demo-sp"}, {"id": "app-1"},
     "three-tier-app", "three-tier-app/container/app-1"),
    # the January form names its provider itself (ingest checks it against the topic)
    ({"type": "dcm.providers.aws.vm.i-1.status", "source": "x"}, {}, "azure", "aws/vm/i-1"),
])
def test_current_upstream_form_takes_the_topic_provider_and_data_id(attrs, data, topic_provider, expected):
    assert str(resolve(attrs, data, topic_provider)) == expected


@pytest.mark.parametrize("value", [7, 7.5, None, True, ["a"], {"x": 1}])
def test_a_non_string_data_id_is_schema_invalid_not_a_crash(value):
    with pytest.raises(Rejected) as info:
        resolve({"type": "dcm.status.vm", "source": "dcm/providers/aws"}, {"id": value}, "aws")
    assert info.value.reason is Reason.SCHEMA_INVALID and info.value.detail["path"] == "/data/id"


# ---- the NATS subject names the type (issue 38 item 1) ------------------------------------------------
@pytest.mark.parametrize("subject, named", [
    ("dcm.container", "container"), ("dcm.vm", "vm"), ("dcm.agents.health", None), ("dcm.agent.env-1", None),
    ("dcm.agent.env-1.cancel", None), ("dcm.agents.responses", None), ("dcm.", None), ("vm", None), (None, None),
    ("other.container", None)])
def test_a_subject_names_a_type_with_one_token_after_dcm_as_the_control_planes_filter_reads_it(subject, named):
    from dcm_status_contracts.identity import subject_type
    assert subject_type(subject) == named


def test_the_transport_type_is_read_in_the_upstream_form_whatever_the_type_says():
    attrs = {"type": "dcm.status.updated", "source": "dcm/providers/e2e-test"}
    assert str(resolve(attrs, {"id": "c-1"}, "e2e-test", transport_type="container")) == "e2e-test/container/c-1"
    assert str(resolve({"type": "test", "source": "test"}, {"id": "c-1"}, "e2e-test", "container")) == \
        "e2e-test/container/c-1"
    with pytest.raises(Rejected) as refused:  # the test suite's "missing id in payload"
        resolve({"type": "test", "source": "test"}, {"status": "RUNNING"}, "e2e-test", "container")
    assert refused.value.reason is Reason.INVALID_IDENTITY


def test_names_a_type_only_for_a_known_one_or_the_january_form():
    from dcm_status_contracts.identity import names_a_type
    known = {"vm", "container"}
    assert names_a_type("dcm.status.vm", known) and names_a_type("dcm.providers.aws.volume.v-1.status", known)
    assert not names_a_type("dcm.status.updated", known) and not names_a_type("test", known)
