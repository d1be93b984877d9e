"""How long a resource stays known without a report (Settings.stale_after, topology.yaml's freshness)."""

from __future__ import annotations

import json

import pytest

from shared.contracts.errors import ConfigError
from shared.runtime import settings


def of(default: dict, profiles: dict | None = None) -> settings.Settings:
    return settings.from_env({"DCM_PROJECT": "p", "DCM_FRESHNESS": json.dumps(default),
                              "DCM_PROVIDER_PROFILES": json.dumps(profiles or {})})


def test_the_type_then_the_provider_then_the_default_decide():
    s = of({"report_every": "3600s", "grace": "900s"}, {
        "osac": {"freshness": {"report_every": "600s", "grace": "120s", "types": {"cluster": {"report_every": 1800}}}},
        "kubevirt": {"vocabulary": "kubevirt"}})
    assert s.stale_after("aws", "vm") == 4500
    assert s.stale_after("kubevirt", "vm") == 4500  # a profile without freshness: the default
    assert s.stale_after("osac", "vm") == 720
    assert s.stale_after("osac", "cluster") == 1920  # the type's interval, the provider's grace


def test_no_freshness_declared_means_no_deadline():
    assert of({}).stale_after("aws", "vm") is None


@pytest.mark.parametrize("text", ['[1]', '{"report_every": "soon"}', "not json"])
def test_a_freshness_setting_that_cannot_be_read_is_a_configuration_error(text):
    with pytest.raises(ConfigError, match="DCM_FRESHNESS"):
        settings.from_env({"DCM_PROJECT": "p", "DCM_FRESHNESS": text})
