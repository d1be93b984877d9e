"""Cost model from counted operations: what one event costs, per outcome, at public list prices.

The real handlers run in process against the Firestore emulator, with every Firestore read and
write and every Pub/Sub publish counted (nothing assumed about what the code does). Firestore is counted
at the client's RPCs, as Firestore bills them (``CountingApi``: a query's documents too, at least one
read per query):

- an applied status change (ingest -> upsert, which writes its transition of usage in its commit (issue 40);
  on the changed topic, notify with no callback registered and audit, filtered out when it is no stop),
- an unchanged re-report, a duplicate delivery, an invalid event (dead-lettered and stored).

Pub/Sub deliveries follow the topology: one per subscription of the topic published to (a
filtered-out delivery is billed as delivered, so it is counted). Prices are the public list prices
below (USD, as published on cloud.google.com/firestore/pricing, /pubsub/pricing and
/functions/pricing; regional Firestore, Cloud Run functions tier 1); change them here to re-price.

Per function: the applied change's figures split by who causes them: a function's own Firestore reads and
writes, invocations and CPU, the messages it publishes (their publish throughput), and the deliveries to
its subscriptions (a filtered-out one included: billed as delivered). The provider's publish into ingress
is a row of its own. The rows add up to the table's "applied change" row.

Prints a table and the breakdown; asserts nothing (run: make bench). Target: <= $5 per million applied
events. docs/cost.md has the model, the figures and the decisions taken on them.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from datetime import timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DCM_PROJECT", "bench")

import orjson  # noqa: E402
from dcm_status_contracts import status_changed, timeutil  # noqa: E402
from dcm_status_contracts.model import PubSubMessage  # noqa: E402
from dcm_status_contracts.pubsub_binding import to_message  # noqa: E402
from dcm_status_contracts.status_report import build_event  # noqa: E402

from infra.local import emulators  # noqa: E402
from infra.topology import Topology, load  # noqa: E402
from shared.audit.handler import Audit  # noqa: E402
from shared.billing.handler import Billing  # noqa: E402
from shared.deadletter.handler import DeadLetter  # noqa: E402
from shared.ingest.handler import Ingest  # noqa: E402
from shared.notify.handler import Notify  # noqa: E402
from shared.runtime import settings  # noqa: E402
from shared.runtime.clients import Runtime  # noqa: E402
from shared.state.usage import snapshot  # noqa: E402
from shared.upsert.handler import Upsert  # noqa: E402

# Public list prices (USD).
FIRESTORE_READ = 0.03 / 100_000  # per document read (regional)
FIRESTORE_WRITE = 0.09 / 100_000  # per document write (regional)
PUBSUB_PER_TIB = 40.0  # throughput: each publish and each delivery, at least 1,000 bytes
FUNCTION_INVOCATION = 0.40 / 1_000_000
VCPU_SECOND, GIB_SECOND, MEMORY_GIB = 0.000024, 0.0000025, 0.25  # compute: the CPU time measured per invocation
TIB = 1024 ** 4
FIRESTORE_OPS = ("firestore reads", "firestore writes")
PROVIDER = "provider"  # who publishes into ingress: not one of our functions, but its publish is billed to us
FUNCTIONS = (PROVIDER, "ingest", "upsert", "billing", "audit", "notify", "deadletter")  # the breakdown's order


class CountingApi:
    """The Firestore client's RPCs, counted as Firestore bills them (installed under the client, so every
    path counts: single calls, batches, transactions, queries):

    - a commit: one document write per write it carries (a write's field transforms are part of it);
    - a get (``batch_get_documents``): one document read per document asked for, found or not;
    - a query: one document read per document returned, and at least one (a query that finds nothing);
    - an aggregation query (count): one read per query (per 1,000 index entries: the bench's are fewer).
    """

    def __init__(self, api, tally: Counter):
        self.api, self.tally = api, tally

    def __getattr__(self, name):
        return getattr(self.api, name)

    def commit(self, request=None, **kwargs):
        self.tally["firestore writes"] += len(_field(request, "writes"))
        return self.api.commit(request=request, **kwargs)

    def batch_get_documents(self, request=None, **kwargs):
        self.tally["firestore reads"] += len(_field(request, "documents"))
        return self.api.batch_get_documents(request=request, **kwargs)

    def run_query(self, request=None, **kwargs):
        self.tally["firestore reads"] += 1  # a query's minimum, which its first document uses up
        return self._returned(self.api.run_query(request=request, **kwargs))

    def run_aggregation_query(self, request=None, **kwargs):
        self.tally["firestore reads"] += 1
        return self.api.run_aggregation_query(request=request, **kwargs)

    def _returned(self, responses):
        first = True
        for response in responses:
            if response._pb.HasField("document"):
                if not first:
                    self.tally["firestore reads"] += 1
                first = False
            yield response


def _field(request, name: str):
    return request[name] if isinstance(request, dict) else getattr(request, name)


def counting(db, tally: Counter):
    """``db`` with its RPCs counted into ``tally``."""
    db._firestore_api_internal = CountingApi(db._firestore_api, tally)
    return db


@dataclass
class Bus:
    """Publishes to the handlers the topology wires, counting publishes, deliveries and invocations, in all
    (``tally``) and per function (``per_function``: what each one causes, see the module's docstring)."""

    tally: Counter
    handlers: dict
    subscribers: dict  # topic -> the consumer of each of its subscriptions (a function, or a pull subscription)
    log: list
    runtime: Runtime | None = None
    published: int = 0
    per_function: dict = field(default_factory=dict)  # name -> Counter
    running: str = PROVIDER  # the function whose handler runs (what it publishes is its own)

    def of(self, name: str) -> Counter:
        return self.per_function.setdefault(name, Counter())

    def publish(self, topic: str, data: bytes, ordering_key: str = "", **attributes):
        from concurrent.futures import Future

        name = topic.rsplit("/", 1)[-1]
        size = max(1000, len(data) + sum(len(k) + len(v) for k, v in attributes.items()))
        consumers = self.subscribers.get(name, [])
        self.tally["pubsub bytes"] += size * (1 + len(consumers))
        self.tally["pubsub publishes"] += 1
        self.of(self.running)["pubsub bytes"] += size
        self.of(self.running)["pubsub publishes"] += 1
        for consumer in consumers:
            self.of(consumer)["pubsub bytes"] += size
            self.of(consumer)["pubsub deliveries"] += 1
        self.published += 1
        self.log.append((name, PubSubMessage(data, attributes, f"m{self.published}", None, name)))
        future: Future = Future()
        future.set_result(str(self.published))
        return future

    def resume_publish(self, topic, key):
        pass

    def drain(self) -> None:
        """Deliver until quiet, as the push subscriptions and the entry point would (Rejected: dead-lettered)."""
        from dcm_status_contracts.errors import Rejected

        from shared.runtime.entrypoint import publish_rejection

        while self.log:
            topic, message = self.log.pop(0)
            for name, handler, wanted in self.handlers.get(topic, []):
                if not wanted(message):  # a subscription filter: billed as delivered, never invoked
                    continue
                self.tally["function invocations"] += 1
                own = self.of(name)
                own["function invocations"] += 1
                before = Counter({k: self.tally[k] for k in FIRESTORE_OPS})
                self.running, started = name, time.process_time()
                try:
                    handler(message)
                except Rejected as exc:
                    publish_rejection(self.runtime, message, exc, name)
                finally:
                    self.running = PROVIDER
                cpu = time.process_time() - started
                self.tally["cpu seconds"] += cpu
                own["cpu seconds"] += cpu
                own.update({k: self.tally[k] - before[k] for k in FIRESTORE_OPS})


def price(t: Counter) -> float:
    return (t["firestore reads"] * FIRESTORE_READ + t["firestore writes"] * FIRESTORE_WRITE
            + t["pubsub bytes"] / TIB * PUBSUB_PER_TIB
            + t["function invocations"] * FUNCTION_INVOCATION
            + t["cpu seconds"] * (VCPU_SECOND + MEMORY_GIB * GIB_SECOND))


def warm_up(db, attempts: int = 30) -> None:
    """A fresh emulator's first commits can outlast the handlers' 5 s timeout on a loaded machine: write until
    one goes through quickly, before anything is counted (the handlers do not retry: Pub/Sub would)."""
    ref = db.collection("bench_warm_up").document("w")
    for _ in range(attempts):
        started = time.monotonic()
        ref.set({"at": started}, timeout=60)
        if time.monotonic() - started < 0.5:
            break
    ref.delete(timeout=60)


def print_functions(row: dict) -> None:
    """The breakdown of one outcome's row per function (and the provider's publish), with their sum."""
    cols = ["firestore reads", "firestore writes", "pubsub publishes", "pubsub deliveries", "function invocations"]
    functions = row["functions"]
    names = [f for f in FUNCTIONS if f in functions] + sorted(set(functions) - set(FUNCTIONS))
    print(f"\n{row['outcome'] + ', per function':<30}" + "".join(f"{c:>22}" for c in cols) + f"{'$ per million':>16}")
    for name in names + ["sum"]:
        values = functions.get(name) or {c: sum(f.get(c, 0) for f in functions.values()) for c in [*cols, "usd"]}
        print(f"{name:<30}" + "".join(f"{values.get(c, 0):>22.2f}" for c in cols) + f"{values['usd'] * 1e6:>16.2f}")
    print("per function: its own Firestore operations, invocations and CPU, the publishes it makes, and the "
          "deliveries to its subscriptions (a filtered-out delivery is billed as delivered)")


def print_rows(rows: list[dict]) -> None:
    """The cost per event of each outcome, then per function for an applied change."""
    cols = ["firestore reads", "firestore writes", "pubsub publishes", "function invocations"]
    print(f"{'per event':<22}" + "".join(f"{c:>22}" for c in cols) + f"{'$ per million':>16}")
    for r in rows:
        print(f"{r['outcome']:<22}" + "".join(f"{r.get(c, 0):>22.2f}" for c in cols) + f"{r['usd'] * 1e6:>16.2f}")
    print("prices: Firestore regional $0.03/100k reads, $0.09/100k writes; Pub/Sub $40/TiB (1 KB minimum per "
          "publish and per delivery); Cloud Run functions $0.40/M invocations, $0.000024/vCPU-s and "
          "$0.0000025/GiB-s (256 MiB) over the CPU time measured per invocation")
    print(f"cost per million applied events: ${rows[0]['usd'] * 1e6:.2f} (target <= $5)")
    print_functions(rows[0])


def _pipeline(topo: Topology, s: settings.Settings, db: object, tally: Counter) -> Bus:
    """The functions in this process, each on the topics it is pushed from (with its subscription's filter)."""
    subscribers: dict[str, list[str]] = {}
    for spec in topo.subscriptions:  # a pull subscription (the dead-letter archive) is its own consumer
        subscribers.setdefault(spec.topic, []).append(spec.push or spec.name)
    bus = Bus(tally, {}, subscribers, [])
    runtime = bus.runtime = Runtime.of(s, db, bus)
    ingest, upsert = Ingest.build(runtime), Upsert.build(runtime)
    audit, deadletter = Audit.build(runtime), DeadLetter.build(runtime)
    every = lambda m: True  # noqa: E731
    stopped = lambda m: orjson.loads(m.data)["data"]["newStatus"] == "STOPPED"  # noqa: E731 - audit's filter
    maybe_callback = lambda m: status_changed.notify_wanted(m.attributes)  # noqa: E731 - notify's filter
    bus.handlers = {s.ingress_topic("aws"): [("ingest", ingest, every)],
                    s.normalized_topic("aws"): [("upsert", upsert, every)],
                    s.topic_changed: [("audit", audit, stopped), ("notify", Notify.build(runtime), maybe_callback)],
                    s.topic_deadletter: [("deadletter", deadletter, every)]}
    return bus


def usage_keep(db, every: int, tally: Counter, send, drain, n: int = 50) -> dict:
    """Billing keeping the daily usage snapshot (shared/state/usage/snapshot.py) on a tick of the sweep's topic,
    counted per applied change: ``n`` resources created an hour ago and the snapshot kept (its first keep, not
    counted), then each changed and the snapshot kept again, ``every`` seconds later (its Firestore work: one
    invocation a tick is no cost per change)."""
    tick = PubSubMessage(b'{"tick": "sweep"}', {}, "t", None, "dcm-status-sweep")
    hour_ago = timeutil.now() - timedelta(hours=1)
    for i in range(n):
        send(i, "RUNNING", timeutil.format(hour_ago))
        drain()
    first = timeutil.now() + snapshot.GRACE
    Billing(db, every, clock=lambda: first)(tick)
    for i in range(n):
        send(i, "STOPPED", timeutil.format(hour_ago + timedelta(minutes=30)))
        drain()
    tally.clear()
    Billing(db, every, clock=lambda: timeutil.now() + snapshot.GRACE + timedelta(seconds=every))(tick)
    return {**{k: v / n for k, v in tally.items()}, "usd": price(tally) / n}


def print_keep(keep: dict) -> None:
    print(f"off the event path, billing keeping the daily usage snapshot (shared/state/usage/snapshot.py), per "
          f"applied change: {keep.get('firestore reads', 0):.2f} reads, {keep.get('firestore writes', 0):.2f} "
          f"writes, ${keep['usd'] * 1e6:.2f} per million (each transition read once; docs/cost.md)")


def main() -> None:
    logging.getLogger("dcm").setLevel(logging.ERROR)  # the handlers' per-event log lines are not the figures
    tmp = Path(tempfile.mkdtemp())
    fs = emulators.start("firestore", tmp)
    os.environ["FIRESTORE_EMULATOR_HOST"] = fs.host
    try:
        from google.cloud import firestore

        topo = load()
        # local mode: notify signs with a keyring made for this process (no secret to configure for a bench)
        s = settings.from_env({**os.environ, **topo.env(), "DCM_PROJECT": "bench", "DCM_LOCAL_MODE": "1"})
        tally: Counter = Counter()
        db = counting(firestore.Client(project="bench"), tally)
        bus = _pipeline(topo, s, db, tally)
        topic = s.ingress_topic("aws")

        def event(rid: str, status: str, at: str, eid: str, message: str = "up") -> tuple[bytes, dict]:
            return to_message(build_event("aws", "vm", rid, status, message, event_id=eid, time=at))

        def measure(name: str, n: int, send) -> dict:
            tally.clear()
            bus.per_function.clear()
            for i in range(n):
                send(i)
                bus.drain()
            functions = {f: {**{k: v / n for k, v in t.items()}, "usd": price(t) / n}
                         for f, t in bus.per_function.items()}
            return {"outcome": name, **{k: v / n for k, v in tally.items()}, "usd": price(tally) / n,
                    "functions": functions}

        def publish(data: bytes, attrs: dict) -> None:
            bus.publish(f"projects/bench/topics/{topic}", data, **attrs)

        warm_up(db)
        rows = []
        for i in range(50):  # every resource exists, RUNNING
            publish(*event(f"vm-{i}", "RUNNING", "2026-01-01T00:00:00Z", f"c-{i}"))
            bus.drain()
        rows.append(measure("applied change", 50, lambda i: publish(
            *event(f"vm-{i}", "STOPPED" if i % 2 else "PROVISIONING", "2026-01-01T01:00:00Z", f"a-{i}"))))
        rows.append(measure("unchanged re-report", 50, lambda i: publish(
            *event(f"vm-{i}", "STOPPED" if i % 2 else "PROVISIONING", "2026-01-01T02:00:00Z", f"u-{i}"))))
        rows.append(measure("duplicate", 50, lambda i: publish(
            *event(f"vm-{i}", "STOPPED" if i % 2 else "PROVISIONING", "2026-01-01T02:00:00Z", f"u-{i}"))))
        rows.append(measure("dead letter", 50, lambda i: publish(b"not json %d" % i, {})))
        print_rows(rows)
        print_keep(usage_keep(db, s.usage_every_seconds, tally,
                              lambda i, status, at: publish(*event(f"k-{i}", status, at, f"k-{i}-{status}")), bus.drain))
    finally:
        fs.stop()


if __name__ == "__main__":
    main()
