"""output_spec and outputs: what an event carries, what is kept, how a diff names them, what readers see."""

from __future__ import annotations

import pytest
from dcm_status_contracts import status_report
from dcm_status_contracts.diff import changes
from dcm_status_contracts.errors import ConfigError
from dcm_status_contracts.outputs import REDACTED, Redaction, carried, differ, kept
from dcm_status_contracts.status_changed import observed

from shared.runtime import settings

SPEC = {"host": "10.0.1.5", "port": 5432, "db": {"user": "app", "password": "s3cret"},
        "url": "postgres://app:s3cret@10.0.1.5:5432/orders", "endpoints": [{"address": "a", "token": "t0k"}]}


def test_an_event_carries_a_map_not_null_nor_an_absent_field():
    assert carried({"output_spec": {"a": 1}, "outputs": None}) == {"output_spec": {"a": 1}}
    assert carried({"outputs": {}}) == {"outputs": {}}  # {} is carried: it clears the stored map
    assert carried({"status": "RUNNING"}) == {}


def test_a_map_the_update_does_not_carry_is_kept_and_one_it_carries_replaces_it_whole():
    stored = {"output_spec": {"host": "a", "port": 1}, "outputs": {"x": 1}}
    assert kept({"status": "RUNNING"}, stored) == {"status": "RUNNING", **stored}
    assert kept({"output_spec": {"host": "b"}}, stored) == {"output_spec": {"host": "b"}, "outputs": {"x": 1}}
    assert kept({"output_spec": {}}, stored)["output_spec"] == {}
    assert kept({"status": "RUNNING"}, None) == {"status": "RUNNING"}
    assert differ(stored, kept({"output_spec": {"host": "a", "port": 2}}, stored))
    assert not differ(stored, kept({}, stored))


def test_diff_names_an_output_by_json_pointer_and_says_nothing_of_a_map_never_sent():
    old = observed({"status": "RUNNING", "output_spec": {"host": "a", "p/q": 1}})
    new = observed({"status": "RUNNING", "output_spec": {"host": "b", "p/q": 1}, "outputs": {"port": 1}})
    assert changes(old, new) == [{"attribute": "/output_spec/host", "old": "a", "new": "b"},
                                 {"attribute": "/outputs", "old": None, "new": {"port": 1}}]
    assert changes(observed({"status": "A"}), observed({"status": "A"})) == []  # no output map: no entry


def test_default_redaction_hides_credential_names_at_any_depth_and_url_passwords():
    seen = Redaction.default().resource({"status": "RUNNING", "output_spec": SPEC, "metadata": {"token": "m"}})
    assert seen["output_spec"] == {"host": "10.0.1.5", "port": 5432, "db": {"user": "app", "password": REDACTED},
                                   "url": f"postgres://app:{REDACTED}@10.0.1.5:5432/orders",
                                   "endpoints": [{"address": "a", "token": REDACTED}]}
    assert seen["metadata"] == {"token": "m"}  # only the output maps are redacted
    assert SPEC["db"]["password"] == "s3cret"  # a copy: the stored state is untouched


def test_a_pointer_hides_a_whole_subtree_and_names_are_case_insensitive():
    rule = Redaction.parse("/output_spec/db, Host")
    seen = rule.resource({"output_spec": SPEC, "outputs": {"HOST": "h"}})
    assert seen["output_spec"]["db"] == REDACTED and seen["output_spec"]["host"] == REDACTED
    assert seen["outputs"] == {"HOST": REDACTED}
    assert seen["output_spec"]["endpoints"][0]["token"] == "t0k"  # an explicit list replaces the default names


def test_a_hidden_value_that_changed_is_still_announced_as_changed():
    found = Redaction.default().changes(changes(observed({"output_spec": {"password": "a"}}),
                                                observed({"output_spec": {"password": "b"}})))
    assert found == [{"attribute": "/output_spec/password", "old": REDACTED, "new": REDACTED}]
    first = Redaction.default().changes(changes(None, observed({"status": "R", "output_spec": SPEC})))
    assert "s3cret" not in repr(first)  # a whole map first seen is redacted inside


def test_none_hides_nothing_and_a_pointer_outside_the_output_maps_is_refused():
    assert Redaction.parse("none").resource({"output_spec": SPEC})["output_spec"] == SPEC
    assert not Redaction.parse("none").active
    with pytest.raises(ValueError, match="inside"):
        Redaction.parse("/metadata/token")
    with pytest.raises(ValueError):
        Redaction.parse("/output_spec")


def test_the_setting_reads_DCM_OUTPUT_REDACT():
    env = {"DCM_PROJECT": "p"}
    assert settings.from_env(env).output_redaction == Redaction.default()
    assert settings.from_env({**env, "DCM_OUTPUT_REDACT": "dsn"}).output_redaction.names == frozenset({"dsn"})
    with pytest.raises(ConfigError, match="DCM_OUTPUT_REDACT"):
        settings.from_env({**env, "DCM_OUTPUT_REDACT": "/status"})


def test_build_event_sends_the_maps_it_is_given_and_none_it_is_not():
    event = status_report.build_event("aws", "vm", "i-1", "RUNNING", output_spec={"host": "h"}, outputs={})
    assert event.data["output_spec"] == {"host": "h"} and event.data["outputs"] == {}
    assert "output_spec" not in status_report.build_event("aws", "vm", "i-1", "RUNNING").data
