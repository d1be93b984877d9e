"""Where each process of a local stack stands: alive, answering, restarted how often (``dcm-status status``).

A process under a keeper (infra/local/supervise.py) is UP (kept, answering), RESTARTING (kept, not answering
yet), UNSUPERVISED (answering, its keeper gone: nothing would restart it) or DOWN.
"""

from __future__ import annotations

import dataclasses
import enum
from dataclasses import dataclass

import requests

from infra.local import natsserver, supervise
from infra.local.emulators import Process
from infra.local.state import StackPaths, StackState
from infra.topology import Topology


class Condition(enum.StrEnum):
    UP = "up"
    DOWN = "down"
    RESTARTING = "restarting"  # its keeper is alive, its server not answering (yet)
    UNSUPERVISED = "unsupervised"  # its server answers, its keeper is gone: nothing would restart it
    OUTAGE = "outage (chaos)"  # the Firestore fault proxy is cutting Firestore off


@dataclass(frozen=True)
class StackHealth:
    component: str
    where: str
    status: Condition
    restarts: int = 0
    detail: str = ""  # the NATS ingress: its lag (pending messages) and last error


def answers_http(host: str, timeout: float = 2.0) -> bool:
    """Whether something answers HTTP at ``host`` (host:port), whatever the status."""
    try:
        requests.get(f"http://{host}/", timeout=timeout)
        return True
    except requests.RequestException:
        return False


def _probe(proc: Process) -> Condition:
    """UP when the process is alive and answers HTTP on its port."""
    return Condition.UP if proc.alive() and answers_http(proc.host) else Condition.DOWN


def stack_health(paths: StackPaths, state: StackState, topology: Topology) -> list[StackHealth]:
    """Every process of the stack: alive, answering, restarted how often."""
    rows = [StackHealth("pubsub-emulator", state.pubsub_host, _probe(Process(**state.pubsub))),
            StackHealth("firestore-emulator", state.firestore_host, _probe(Process(**state.firestore)))]
    if state.firestore_proxy:
        proxy = Process(**state.firestore_proxy)
        status = ((Condition.OUTAGE if paths.outage_flag.exists() else Condition.UP) if proxy.alive()
                  else Condition.DOWN)
        rows.append(StackHealth("firestore-proxy", proxy.host, status))
    return rows + function_health(paths, state, topology) + nats_health(paths, state)


def function_health(paths: StackPaths, state: StackState, topology: Topology) -> list[StackHealth]:
    rows = []
    for name in topology.functions:
        f = state.functions.get(name)
        if f is None:
            rows.append(StackHealth(f"function {name}", "-", Condition.DOWN))
            continue
        keeper = Process(**f)
        rows.append(_kept_health(paths, f"function {name}", f"http://{keeper.host}", f, keeper.host, name))
    return rows


def nats_health(paths: StackPaths, state: StackState) -> list[StackHealth]:
    """nats-server and the NATS ingress: alive, answering, restarted how often; the ingress's lag."""
    if not state.nats:
        return []
    server = _kept_health(paths, natsserver.NATS_SERVER, state.nats_url, state.nats,
                          f"127.0.0.1:{state.nats_http_port}")
    if not state.nats_ingress:
        return [server, StackHealth(natsserver.NATS_INGRESS, "-", Condition.DOWN)]
    host = Process(**state.nats_ingress).host
    ingress = _kept_health(paths, natsserver.NATS_INGRESS, f"http://{host}/healthz", state.nats_ingress, host)
    if ingress.status is Condition.UP:
        ingress = dataclasses.replace(ingress, detail=natsserver.describe(natsserver.ingress_report(host)))
    return [server, ingress]


def _kept_health(paths: StackPaths, component: str, where: str, keeper: dict, probe: str,
                 name: str | None = None) -> StackHealth:
    """A process under a keeper (``name``: its keeper's, when not the component's): UP, RESTARTING,
    UNSUPERVISED or DOWN, and its restarts."""
    answers = answers_http(probe)
    if Process(**keeper).alive():
        status = Condition.UP if answers else Condition.RESTARTING
    else:
        status = Condition.UNSUPERVISED if answers else Condition.DOWN
    return StackHealth(component, where, status, supervise.restart_count(paths.pidfile(name or component)))
