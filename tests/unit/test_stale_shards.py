"""DCM_STALE_SHARDS: the freshness deadline's index ranges, upsert's and the sweep's alike (docs/scale.md)."""

import pytest
from dcm_status_contracts.errors import ConfigError

from shared.runtime import settings
from shared.state.documents import STALE_SHARDS, stale_shard_of
from shared.sweep.handler import Sweep
from shared.upsert.decision import Policy


def test_the_default_is_what_the_index_declares_and_a_local_stack_may_use_fewer():
    assert settings.from_env({"DCM_PROJECT": "p"}).stale_shards == STALE_SHARDS == 360
    assert settings.from_env({"DCM_PROJECT": "p", "DCM_STALE_SHARDS": "30"}).stale_shards == 30


@pytest.mark.parametrize("value", ["0", "361", "-1", "many"])
def test_a_count_outside_1_to_360_is_a_config_error(value):
    with pytest.raises(ConfigError, match="DCM_STALE_SHARDS"):
        settings.from_env({"DCM_PROJECT": "p", "DCM_STALE_SHARDS": value})


def test_upsert_writes_only_shards_the_sweep_reads():
    s = settings.from_env({"DCM_PROJECT": "p", "DCM_STALE_SHARDS": "30"})
    assert Sweep(s, None, None).stale_space == tuple(range(30))
    assert {stale_shard_of(f"aws/vm/i-{i}", s.stale_shards) for i in range(2000)} == set(range(30))
    assert Policy(stale_shards=30).stale_shards == 30
    with pytest.raises(ValueError):
        Policy(stale_shards=STALE_SHARDS + 1)
