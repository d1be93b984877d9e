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


# ---- issue 37, item 4: a credential is recognised by the words of its name, in URLs and connection strings --
@pytest.mark.parametrize("key", ["db_password", "adminPassword", "secret_key", "aws_secret_access_key", "access_token",
                                 "kubeconfig", "ssh_private_key", "sshPrivateKey", "DB-PASSWORD", "kube.config",
                                 "MYSQL_ROOT_PASSWORD", "APIKey", "api_keys", "client_secret", "db_pwd", "gcpCredentials",
                                 "password_hint"])
def test_a_credential_key_is_hidden_by_its_words(key):
    seen = Redaction.default().resource({"output_spec": {"db": {key: "S3cret!"}}, "outputs": {key: "S3cret!"}})
    assert seen["output_spec"]["db"][key] == REDACTED and seen["outputs"][key] == REDACTED


@pytest.mark.parametrize("key", ["token_count", "password_length", "secret_name", "token_type", "keyName", "tokenizer",
                                 "publicKey", "public_key", "host", "passwordless", "kubernetes_version"])
def test_a_key_that_only_speaks_of_a_credential_or_shares_letters_with_one_is_shown(key):
    """A count, a length, a name or a type of a credential is not the credential; nor is a word that merely
    begins like one (tokenizer), nor a public key."""
    assert Redaction.default().resource({"output_spec": {key: "v"}})["output_spec"][key] == "v"


@pytest.mark.parametrize("given, shown", [
    ("jdbc:postgresql://db:5432/app?user=app&password=S3cret!",
     f"jdbc:postgresql://db:5432/app?user=app&password={REDACTED}"),
    ("postgres://app:pa/ss@host", f"postgres://app:{REDACTED}@host"),
    ("amqp://u:p@ss@mq", f"amqp://u:{REDACTED}@mq"),
    ("redis://:pw@cache:6379/0", f"redis://:{REDACTED}@cache:6379/0"),
    ("Server=db;Database=x;User Id=app;Password=p w#1;", f"Server=db;Database=x;User Id=app;Password={REDACTED};"),
    ("Driver={x};Pwd={a;b};Uid=u", f"Driver={{x}};Pwd={REDACTED};Uid=u"),
    ("https://api.example/v1?access_token=abc&page=2", f"https://api.example/v1?access_token={REDACTED}&page=2"),
    ("a://u:p@h then b://v:q@i/x", f"a://u:{REDACTED}@h then b://v:{REDACTED}@i/x"),
])
def test_a_password_in_a_url_or_connection_string_is_masked_whole(given, shown):
    seen = Redaction.default().resource({"output_spec": {"dsn": given}})["output_spec"]["dsn"]
    assert seen == shown
    assert "S3cret" not in seen and "ss@" not in seen and "pa/" not in seen


@pytest.mark.parametrize("kept", ["https://medium.com/@user", "ssh://git@github.com/org/repo", "host=db;port=5432",
                                  "https://api.example/v1?page=2&token_count=3", "x = 1"])
def test_a_url_or_string_without_a_credential_is_left_as_it_is(kept):
    assert Redaction.default().resource({"outputs": {"v": kept}})["outputs"]["v"] == kept


def test_a_configured_name_is_matched_by_its_words_too():
    rule = Redaction.parse("dsn, connection_string")
    seen = rule.resource({"output_spec": {"primary_dsn": "d", "readConnectionString": "c", "token": "t"}})
    assert seen["output_spec"] == {"primary_dsn": REDACTED, "readConnectionString": REDACTED, "token": "t"}


def test_a_hostile_string_is_masked_by_a_scan_not_by_backtracking():
    """Many '://' and '@', many parameters: masked in one pass over the string (no time is asserted: a
    quadratic scan of these 240,000 characters would keep the test from ending)."""
    assert Redaction.default().text("a://x:" * 40_000 + "@h") == f"a://x:{REDACTED}@h"
    for hostile in (" a://x:@" * 20_000, ";a" * 80_000 + "=", "?a=b&" * 40_000):
        assert Redaction.default().text(hostile).endswith(hostile[-3:].replace("x:@", f"x:{REDACTED}@")[-3:])
