"""The fleet simulation behind ``make demo``.

A few hundred resources of every type go through their lifecycles, reported
by several providers, with duplicates, out-of-order deliveries and invalid
events mixed in. Every published message is accounted for at the end:
published = applied + duplicate + stale + dead-lettered.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from datetime import datetime, timedelta

import orjson
from cloudevents.http import CloudEvent
from dcm_status_contracts import timeutil
from dcm_status_contracts.pubsub_binding import BindingMode, to_message
from dcm_status_contracts.status_report import build_event

PROVIDERS = ("aws", "azure", "vmware", "kubernetes")
LIFECYCLES: dict[str, list[list[str]]] = {
    "vm": [["PROVISIONING", "RUNNING", "STOPPING", "STOPPED", "RUNNING"],
           ["PROVISIONING", "RUNNING", "DELETING", "DELETED"],
           ["PROVISIONING", "FAILED"],
           ["PROVISIONING", "RUNNING", "PAUSED", "RUNNING", "STOPPING", "STOPPED"]],
    "container": [["PENDING", "RUNNING", "SUCCEEDED"], ["PENDING", "RUNNING", "FAILED"], ["PENDING", "RUNNING"]],
    "cluster": [["PROGRESSING", "ACTIVE", "PROGRESSING", "ACTIVE"], ["PROGRESSING", "ACTIVE", "DEGRADED"],
                ["PROGRESSING", "ACTIVE", "DELETED"], ["PROGRESSING", "UNAVAILABLE", "FAILED"]],
    "storage": [["PROVISIONING", "RUNNING", "PROVISIONING", "RUNNING"],
                ["PROVISIONING", "RUNNING", "DELETING", "DELETED"], ["PROVISIONING", "FAILED"]],
    "volume": [["CREATING", "AVAILABLE", "RUNNING", "AVAILABLE"], ["CREATING", "AVAILABLE", "DELETING", "DELETED"],
               ["CREATING", "AVAILABLE", "RUNNING"]],
    "network": [["PENDING", "READY"], ["PENDING", "READY", "DEGRADED", "READY"], ["PENDING", "FAILED"]],
}
TENANTS = ("acme", "globex", "initech")
REGIONS = ("eu-west-1", "us-east-1")

# Invalid events a buggy provider might send, each with the reason it must be dead-lettered for.
INVALID_KINDS = ("malformed_json", "not_a_cloudevent", "schema_invalid", "unknown_schema",
                 "unknown_resource_type", "provider_mismatch", "oversize")


@dataclass(frozen=True)
class Message:
    provider: str
    data: bytes
    attributes: dict[str, str]
    key: str | None  # the resource it reports on (None for invalid ones)
    kind: str  # "status" | "duplicate" | an invalid kind


@dataclass
class Fleet:
    """The messages to publish, in publication order, and what the end state must be."""

    messages: list[Message] = field(default_factory=list)
    expected: dict[str, str] = field(default_factory=dict)  # key -> final status
    lifecycles: dict[str, list[tuple[str, str]]] = field(default_factory=dict)  # key -> [(time, status)]
    labels: dict[str, dict[str, str]] = field(default_factory=dict)
    rounds: list[list[Message]] = field(default_factory=list)
    start: datetime | None = None  # UTC midnight before the first transition

    @property
    def published(self) -> int:
        return sum(len(r) for r in self.rounds)


def _invalid(kind: str, provider: str, rng: random.Random, n: int) -> Message:
    other = next(p for p in PROVIDERS if p != provider)
    base = {"specversion": "1.0", "id": f"bad-{n}", "source": f"{provider}-prod",
            "type": f"dcm.providers.{provider}.vm.instances.broken-{n}.status",
            "data": {"status": "RUNNING", "message": "buggy provider"}}
    if kind == "malformed_json":
        data = b'{"specversion": "1.0", "id": '
    elif kind == "not_a_cloudevent":
        data = orjson.dumps({k: v for k, v in base.items() if k != "source"})
    elif kind == "schema_invalid":
        data = orjson.dumps({**base, "data": {"status": 42, "message": "status must be a string"}})
    elif kind == "unknown_schema":
        data = orjson.dumps({**base, "dataschema": "https://schemas.dcm.org/vm/status-v7.json"})
    elif kind == "unknown_resource_type":
        data = orjson.dumps({**base, "type": f"dcm.providers.{provider}.database.db-{n}.status"})
    elif kind == "provider_mismatch":
        data = orjson.dumps({**base, "type": f"dcm.providers.{other}.vm.instances.spoof-{n}.status"})
    elif kind == "oversize":
        data = orjson.dumps({**base, "data": {"status": "RUNNING", "message": "x" * 70_000}})
    else:
        raise ValueError(kind)
    return Message(provider, data, {"content-type": "application/cloudevents+json"}, None, kind)


def build_fleet(resources: int = 300, seed: int = 7, start: datetime | None = None,
                duplicate_rate: float = 0.05, swap_rate: float = 0.05, invalid_rate: float = 0.03) -> Fleet:
    """A reproducible fleet: same seed, same messages."""
    rng = random.Random(seed)
    start = start or (timeutil.now() - timedelta(days=1)).replace(hour=0, minute=0, second=0, microsecond=0)
    fleet = Fleet(start=start)
    types = list(LIFECYCLES)
    per_resource: list[list[Message]] = []
    n_invalid = 0
    for i in range(resources):
        rtype = types[i % len(types)]
        provider = PROVIDERS[(i // len(types)) % len(PROVIDERS)]
        rid = f"{rtype}-{i:04d}"
        key = f"{provider}/{rtype}/{rid}"
        lifecycle = rng.choice(LIFECYCLES[rtype])
        labels = {"tenant": rng.choice(TENANTS), "region": rng.choice(REGIONS), "environment": "demo"}
        t = start + timedelta(minutes=rng.randint(0, 120))
        msgs: list[Message] = []
        for step, status in enumerate(lifecycle):
            t += timedelta(minutes=rng.randint(5, 240))
            stamp = timeutil.format(t)
            fleet.lifecycles.setdefault(key, []).append((stamp, status))
            event: CloudEvent = build_event(provider, rtype, rid, status, f"{rtype} is {status.lower()}",
                                            event_id=f"{rid}-{step}", time=stamp, last_transition_time=stamp,
                                            metadata=labels, source=f"{provider}-prod")
            mode = BindingMode.BINARY if rng.random() < 0.3 else BindingMode.STRUCTURED
            data, attrs = to_message(event, mode)
            msgs.append(Message(provider, data, attrs, key, "status"))
            if rng.random() < duplicate_rate:
                msgs.append(Message(provider, data, attrs, key, "duplicate"))
        if len(msgs) > 2 and rng.random() < swap_rate * 4:
            j = rng.randrange(len(msgs) - 1)  # deliver two reports out of order
            msgs[j], msgs[j + 1] = msgs[j + 1], msgs[j]
        fleet.expected[key] = lifecycle[-1]
        fleet.labels[key] = labels
        if rng.random() < invalid_rate * 3:
            msgs.append(_invalid(INVALID_KINDS[n_invalid % len(INVALID_KINDS)], provider, rng, n_invalid))
            n_invalid += 1
        per_resource.append(msgs)
    # Round r publishes every resource's r-th message: resources interleave, as in a real fleet.
    depth = max(len(m) for m in per_resource)
    fleet.rounds = [[msgs[r] for msgs in per_resource if r < len(msgs)] for r in range(depth)]
    fleet.messages = [m for r in fleet.rounds for m in r]
    return fleet
