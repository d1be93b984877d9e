"""The NATS ingress's configuration (docs/security.md items 18-23): the platform's NATS user names no provider
can take, the generated accounts' limits and password hashes, the health endpoint's address, NATS_URL as a
list of servers. (What the real nats-server does with the configuration: tests/functional/test_nats_server_config.py.)"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any

import pytest
from dcm_status_contracts import limits
from dcm_status_contracts.errors import ConfigError
from dcm_status_contracts.identity import RESERVED_PROVIDER_NAMES, provider_name_problem

from infra import nats_accounts
from infra.topology import load
from shared.runtime import nats_settings
from shared.runtime import settings as settings_module

SPEC = load().nats


# ---- item 18: a provider named like a platform user ---------------------------------------------------
@pytest.mark.parametrize("name", RESERVED_PROVIDER_NAMES)
def test_a_platform_users_name_is_no_providers_name(name):
    assert "reserved" in (provider_name_problem(name) or "")
    with pytest.raises(ConfigError, match=f"provider name '{name}' is reserved"):
        load(["osac", name])
    assert provider_name_problem("osac") is None and "invalid provider name" in provider_name_problem("AWS!")


def test_the_platform_users_are_reserved_names_and_no_provider_of_the_topology_has_one():
    assert {nats_accounts.PLATFORM_USER, nats_accounts.CONTROL_PLANE_USER} <= set(RESERVED_PROVIDER_NAMES)
    assert not set(load().providers) & set(RESERVED_PROVIDER_NAMES)


def test_the_topology_file_naming_a_reserved_provider_is_refused_in_one_line(tmp_path):
    import yaml

    from infra import topology

    doc = topology.read()
    doc["providers"] = [*doc["providers"], "platform"]
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    with pytest.raises(ConfigError) as refused:
        topology.load(path=path)
    assert str(refused.value).startswith("topology.yaml, providers: provider name 'platform' is reserved")


def test_the_generator_refuses_a_reserved_provider_and_a_control_plane_user_a_provider_could_take(tmp_path, capsys):
    credentials = nats_accounts.ensure_credentials(tmp_path / "c.json", ["osac", "platform"])
    with pytest.raises(ConfigError, match="reserved"):  # a list not from load(): the local stack's state
        nats_accounts.accounts_block(SPEC, credentials, ["osac", "platform"])
    for user, says in (("osac", "could be a provider's"), ("platform", "the ingress's user"), ("a b", "NATS user name")):
        with pytest.raises(ConfigError, match=says):
            nats_accounts.ControlPlane(user, (nats_accounts.ConsumerRef("dcm-status", "cp"),))
    for user in ("control-plane", "control_plane", "dcm.control-plane"):
        nats_accounts.ControlPlane(user, (nats_accounts.ConsumerRef("dcm-status", "cp"),))
    code = nats_accounts.main(["--credentials", str(tmp_path / "d.json"), "--providers", "osac,platform"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "provider name 'platform' is reserved" in err
    code = nats_accounts.main(["--credentials", str(tmp_path / "d.json"), "--providers", "osac",
                               "--control-plane-user", "kubevirt"])
    err = capsys.readouterr().err
    assert code == 2 and err.count("\n") == 1 and "could be a provider's" in err


def test_provider_add_and_up_refuse_a_reserved_name_in_one_line_before_touching_a_stack(tmp_path):
    from click.testing import CliRunner

    from infra.cli import cli

    env = {"DCM_STATE_DIR": str(tmp_path / "no-stack")}
    for args in (["provider", "add", "platform"], ["up", "--providers", "aws,control-plane"]):
        result = CliRunner().invoke(cli, args, env=env, catch_exceptions=False)
        lines = result.stderr.strip().splitlines()
        assert result.exit_code == 2 and "is reserved" in lines[-1] and "Traceback" not in result.stderr, lines
    assert not (tmp_path / "no-stack").exists()


# ---- item 19: limits and bcrypt hashes ---------------------------------------------------------------------
def test_every_account_has_limits_sized_to_the_largest_event_ingest_accepts(tmp_path):
    credentials = nats_accounts.ensure_credentials(tmp_path / "c.json", ["osac", "aws"])
    text = nats_accounts.server_config(SPEC, credentials, ["osac", "aws"], port=4222)
    payload = limits.MAX_EVENT_BYTES + nats_accounts.NATS_HEADER_ALLOWANCE
    accounts = re.findall(r"^  (\w+) \{\n(.*?)^  \}$", text, re.S | re.M)
    assert [name for name, _ in accounts] == ["PLATFORM", "PROVIDER_AWS", "PROVIDER_OSAC"]
    for name, body in accounts:
        wanted = (f"limits: {{max_connections: 64, max_payload: {payload}}}" if name == "PLATFORM" else
                  f"limits: {{max_connections: 64, max_subscriptions: 256, max_payload: {payload}}}")
        assert wanted in body, name
    assert "max_payload" not in text.split("accounts {")[0], "the server's own 1 MiB is above it"
    settings = settings_module.from_env({"DCM_PROJECT": "p"})
    assert nats_accounts.max_payload(settings.max_event_bytes) == payload


def test_max_payload_follows_dcm_max_event_bytes_up_to_a_pubsub_message():
    assert nats_accounts.Limits.from_env({"DCM_MAX_EVENT_BYTES": "1000"}).provider.payload == 1000 + 4096
    huge = nats_accounts.Limits.from_env({"DCM_MAX_EVENT_BYTES": str(50_000_000)})
    assert huge.provider.payload == nats_accounts.PUBSUB_MAX_MESSAGE_BYTES
    text = nats_accounts.server_config(SPEC, nats_accounts.Credentials(
        nats_accounts.Identity("PLATFORM", "platform", "p"), {}), [], port=1, limits=huge)
    assert f"\nmax_payload: {nats_accounts.PUBSUB_MAX_MESSAGE_BYTES}\n" in text  # the server's own bound raised
    for env in ({"DCM_MAX_EVENT_BYTES": "0"}, {"DCM_MAX_EVENT_BYTES": "many"}):
        with pytest.raises(ConfigError):
            nats_accounts.Limits.from_env(env)


def test_the_configuration_holds_bcrypt_hashes_and_the_credentials_file_the_clear_passwords(tmp_path):
    import bcrypt

    path = tmp_path / "c.json"
    credentials = nats_accounts.ensure_credentials(path, ["osac"], ["control-plane"])
    control_plane = nats_accounts.ControlPlane("control-plane", (nats_accounts.ConsumerRef(SPEC.stream, "cp"),))
    text = nats_accounts.server_config(SPEC, credentials, ["osac"], port=4222, control_plane=control_plane)
    hashes = dict(re.findall(r'\{user: "([^"]+)", password: "([^"]+)"', text))
    clear = json.loads(path.read_text())
    assert clear["control_plane"]["control-plane"] == credentials.control_plane["control-plane"].password
    for user, password in (("platform", clear["platform"]), ("osac", clear["providers"]["osac"]),
                           ("control-plane", clear["control_plane"]["control-plane"])):
        assert hashes[user].startswith("$2b$10$") and password not in text
        assert bcrypt.checkpw(password.encode(), hashes[user].encode())


# ---- item 20: the health endpoint's address ------------------------------------------------------------------
def test_the_health_endpoint_binds_loopback_in_local_mode_and_every_interface_on_cloud_run():
    local = nats_settings.nats_from_env({"NATS_URL": "nats://127.0.0.1:4222", "DCM_LOCAL_MODE": "1"})
    production = nats_settings.nats_from_env({"NATS_URL": "tls://nats.example.com:4222", "PORT": "8080"})
    assert (local.health_host, production.health_host) == ("127.0.0.1", "0.0.0.0")
    with pytest.raises(ConfigError):  # local mode on Cloud Run is refused, as for the functions
        nats_settings.nats_from_env({"NATS_URL": "nats://x:4222", "DCM_LOCAL_MODE": "1", "K_SERVICE": "nats"})


def test_the_local_stack_runs_its_ingress_in_local_mode(tmp_path):
    from infra.local import natsserver
    from infra.local.stack import LocalStack
    from infra.local.state import StackState

    stack = LocalStack(state_dir=tmp_path)
    state = StackState(project="p", pubsub={"pid": 0, "port": 1}, firestore={"pid": 0, "port": 2}, providers=["osac"],
                       nats={"pid": 0, "port": 3}, nats_ingress={"pid": 0, "port": 4})
    env = natsserver.ingress_env(stack.paths, stack.topology(state).nats, state, stack.function_env(state))
    settings = nats_settings.nats_from_env(env)
    assert settings.health_host == "127.0.0.1" and settings.servers == (state.nats_url,)


def test_the_ingress_serves_its_health_on_the_settings_address(monkeypatch):
    from shared.nats_ingress import worker

    served: list[tuple[int, str]] = []

    class Stop(Exception):
        pass

    def serve(health: Any, port: int, host: str = "0.0.0.0") -> Any:
        served.append((port, host))
        raise Stop

    monkeypatch.setattr(worker, "serve", serve)
    monkeypatch.setattr(worker, "publisher", lambda ordered=False: object())
    settings = settings_module.from_env({"DCM_PROJECT": "p", "DCM_PROVIDERS": "osac"})
    for env, host in (({"DCM_LOCAL_MODE": "1"}, "127.0.0.1"), ({}, "0.0.0.0")):
        n = nats_settings.nats_from_env({"NATS_URL": "nats://127.0.0.1:4222", "PORT": "8123", **env})
        with pytest.raises(Stop):
            worker.main(lambda: settings, lambda n=n: n)
        assert served.pop() == (8123, host)


# ---- item 23: NATS_URL, a list of servers ---------------------------------------------------------------------
def test_a_comma_separated_nats_url_is_a_list_of_servers():
    cluster = "tls://nats-1.example.com:4222,tls://nats-2.example.com:4222"  # terraform/variables.tf's example
    assert nats_settings.nats_from_env({"NATS_URL": cluster}).servers == (
        "tls://nats-1.example.com:4222", "tls://nats-2.example.com:4222")
    assert nats_settings.nats_from_env({"NATS_URL": " nats://a:4222 , wss://b/ws "}).servers == (
        "nats://a:4222", "wss://b/ws")
    assert nats_settings.nats_from_env({"NATS_URL": "nats://127.0.0.1:4222"}).servers == ("nats://127.0.0.1:4222",)


@pytest.mark.parametrize("url", ["", "tls://a:4222,", "tls://a:4222,http://b:4222", "nats://", "a.example.com:4222",
                                 "nats://a:99999", "nats://a:42x", "nats://a b:4222", "nats://a:1,nats://a:1"])
def test_nats_url_refuses_what_nats_py_cannot_connect_to(url):
    with pytest.raises(ConfigError, match="NATS_URL"):
        nats_settings.nats_from_env({"NATS_URL": url})


def test_a_refused_nats_url_never_shows_its_password():
    with pytest.raises(ConfigError) as refused:
        nats_settings.nats_from_env({"NATS_URL": "nats://u:s3cr3t@a:4222,http://b"})
    assert "s3cr3t" not in str(refused.value)


def test_connect_gives_nats_py_every_server(monkeypatch):
    from shared.nats_ingress import worker
    from shared.nats_ingress.health import IngressHealth

    seen: dict[str, Any] = {}

    async def fake_connect(**options: Any) -> object:
        seen.update(options)
        return object()

    monkeypatch.setattr(worker.nats, "connect", fake_connect)
    n = nats_settings.nats_from_env({"NATS_URL": "tls://a:4222,tls://b:4222", "NATS_USER": "platform",
                                       "NATS_PASSWORD": "pw"})
    asyncio.run(worker.connect(n, IngressHealth()))
    assert seen["servers"] == ["tls://a:4222", "tls://b:4222"] and seen["user"] == "platform"
