"""How long a resource stays known without a report (Settings.stale_after, topology.yaml's freshness)."""

from __future__ import annotations

import json

import pytest
from dcm_status_contracts.errors import ConfigError

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


def test_flapping_is_more_changes_than_the_policy_allows_within_the_window_of_the_newest():
    from shared.state.documents import FlapPolicy

    policy = FlapPolicy(changes=2, window_seconds=60)
    times = []
    flags = []
    for at in ("2026-01-01T00:00:00Z", "2026-01-01T00:00:10Z", "2026-01-01T00:00:20Z", "2026-01-01T00:00:30Z"):
        times, flag = policy.judge(times, at)
        flags.append(flag)
    assert flags == [None, None, {"changes": 3, "windowSeconds": 60}, {"changes": 3, "windowSeconds": 60}]
    assert len(times) == 3  # never more than changes + 1 kept: the document stays small
    times, flag = policy.judge(times, "2026-01-01T00:01:25Z")  # only 00:00:30 is within 60 s of it
    assert flag is None and times == ["2026-01-01T00:00:30Z", "2026-01-01T00:01:25Z"]
    # a change arriving out of order is judged on its own time, and the same time counts once
    assert policy.judge(["2026-01-01T00:00:30Z"], "2026-01-01T00:00:30Z")[0] == ["2026-01-01T00:00:30Z"]


def test_flapping_comes_from_the_topology_and_a_bad_policy_is_a_config_error():
    s = settings.from_env({"DCM_PROJECT": "p", "DCM_FLAPPING": json.dumps({"changes": 3, "window": "120s"})})
    assert (s.flapping.changes, s.flapping.window_seconds) == (3, 120)
    for text in ("[1]", '{"changes": 0}', '{"window": "soon"}', "{"):
        with pytest.raises(ConfigError, match="DCM_FLAPPING"):
            settings.from_env({"DCM_PROJECT": "p", "DCM_FLAPPING": text})
