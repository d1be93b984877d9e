"""End-to-end figures on the emulators, measured in one run on a fresh local stack:

1. the fair ceiling: the Firestore work of one upsert (get_all of the ledger entry
   and the resource, then one batch creating the ledger entry, the resource and a
   history entry with preconditions) issued by one process at the concurrency the
   emulator's push allows (2 in flight per subscription);
2. throughput with every function running (fan-out consumers billing and
   audit included: they share the machine's 2 cores with the emulators);
3. pipeline throughput: provider publish -> ingest -> upsert -> stored, with
   the fan-out consumers detached, events/s;
4. publish -> stored latency, p50/p99, at a paced rate below saturation;
5. where the CPU goes: each process's CPU seconds per event (from /proc) during (1) and (3).
   The emulators, the functions and this process share the machine's cores, so the pipeline can
   go no faster than cores / (its CPU seconds per event): printed beside the fair ceiling;
6. ingest's and upsert's CPU per event against their minimal reference handlers
   (benchmarks/minimal_handlers.py: the same calls for one event and nothing else), served the same way
   (functions-framework under the stack's gunicorn settings and keeper, the same client libraries, push
   subscriptions copied from the real ones), fed the same events in the same run, after (3);
7. where the Firestore emulator's CPU per event goes (benchmarks/breakdown.py): the same burst with the sweep
   as run, without its aggregates, stopped; upsert's calls replayed (reads, writes, the minimal handler's
   documents); each document's bytes, fields and production index entries.

Prints figures; asserts nothing (run: make bench). Targets: issue 32, each of ingest and upsert within 2x
of its minimal handler's CPU per event; issue 42, the pipeline's throughput >= 85% of the minimal handlers',
the emulator's CPU per event <= 1.3x theirs, p99 publish -> stored at 20 events/s <= 250 ms.
"""

from __future__ import annotations

import contextlib
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Iterator

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dcm_status_contracts import timeutil  # noqa: E402
from dcm_status_contracts.pubsub_binding import to_message  # noqa: E402
from dcm_status_contracts.status_report import build_event  # noqa: E402
from google.cloud import firestore, pubsub_v1  # noqa: E402
from google.cloud.firestore_v1.base_query import FieldFilter  # noqa: E402

from infra.local.stack import LocalStack  # noqa: E402

import breakdown  # noqa: E402  (benchmarks/breakdown.py)

THROUGHPUT_EVENTS = int(os.environ.get("BENCH_EVENTS", "1500"))
LATENCY_EVENTS, LATENCY_RATE = 200, 20.0
TX_SAMPLES = 300


def cpu_seconds(groups: dict[str, int]) -> dict[str, float]:
    """CPU seconds (user + system) used so far by each process group (a stack component: an emulator and
    its JVM, a function server and its keeper), and by this process (``bench``)."""
    tick = os.sysconf("SC_CLK_TCK")
    names = {pgid: name for name, pgid in groups.items()}
    used = dict.fromkeys(groups, 0.0)
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            stat = Path(entry.path, "stat").read_text()
        except OSError:  # gone meanwhile
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after the command name: state, ppid, pgrp, ... utime, stime
        name = names.get(int(fields[2]))
        if name is not None:
            used[name] += (int(fields[11]) + int(fields[12])) / tick
    me = os.times()
    used["bench"] = me.user + me.system
    return used


def cpu_per_event(before: dict[str, float], after: dict[str, float], events: int) -> dict[str, float]:
    """ms of CPU per event, per component that used any."""
    spent = {k: (after[k] - before.get(k, 0.0)) * 1000 / events for k in after}
    return {k: v for k, v in sorted(spent.items(), key=lambda kv: -kv[1]) if v >= 0.05}


def show_cpu(label: str, spent: dict[str, float]) -> float:
    total = sum(spent.values())
    parts = ", ".join(f"{k} {v:.1f}" for k, v in spent.items())
    print(f"  CPU per event, {label}: {total:.1f} ms ({parts})")
    return total


def fair_ceiling(db: firestore.Client, groups: dict[str, int], in_flight: int = 2) -> tuple[float, dict[str, float]]:
    """Upsert's Firestore work per event, at the emulator's push concurrency: events/s, and the CPU ms per
    event each component spent on it (after a warm-up: the emulator's JIT and first-call setup excluded)."""
    from concurrent.futures import ThreadPoolExecutor

    def one(i: int) -> None:
        ledger, resource = db.collection("bench-events").document(f"e{i}"), db.collection("bench-res").document(f"r{i}")
        db.get_all([ledger, resource])
        batch = db.batch()
        batch.create(ledger, {"outcome": "applied", "n": i})
        batch.create(resource, {"status": "RUNNING", "n": i})
        batch.set(resource.collection("history").document(f"h{i}"), {"status": "RUNNING"})
        batch.commit()

    with ThreadPoolExecutor(in_flight) as pool:
        list(pool.map(one, range(-TX_SAMPLES, 0)))  # warm-up
        before = cpu_seconds(groups)
        start = time.perf_counter()
        list(pool.map(one, range(TX_SAMPLES)))
        elapsed = time.perf_counter() - start
    return TX_SAMPLES / elapsed, cpu_per_event(before, cpu_seconds(groups), TX_SAMPLES)


def applied(db: firestore.Client, ledger: str = "events") -> int:
    q = db.collection(ledger).where(filter=FieldFilter("outcome", "==", "applied"))
    return int(q.count().get()[0][0].value)


def throughput(db, publisher, topic: str, tag: str, events: int = THROUGHPUT_EVENTS, ledger: str = "events") -> float:
    msgs = [to_message(build_event("aws", "vm", f"{tag}-{i}", "RUNNING", "benchmark"))
            for i in range(events)]
    base = applied(db, ledger)
    start = time.perf_counter()
    for f in [publisher.publish(topic, data, **attrs) for data, attrs in msgs]:
        f.result(timeout=60)
    while applied(db, ledger) - base < events:
        if time.perf_counter() - start > 600:
            raise SystemExit("pipeline did not finish within 600 s")
        time.sleep(1.0)  # each poll is a count query: it costs the emulator CPU too
    return events / (time.perf_counter() - start)


def burst(db, publisher, topic: str, tag: str, groups: dict[str, int]) -> float:
    """The Firestore emulator's CPU ms per event of a burst of ``breakdown.BURST`` new resources."""
    before = cpu_seconds(groups)
    throughput(db, publisher, topic, tag, breakdown.BURST)
    return cpu_per_event(before, cpu_seconds(groups), breakdown.BURST).get(breakdown.EMULATOR, 0.0)


def latency(db, publisher, topic: str) -> tuple[float, float]:
    sent: dict[str, float] = {}
    for i in range(LATENCY_EVENTS):
        rid = f"lat-{i}"
        data, attrs = to_message(build_event("aws", "vm", rid, "RUNNING", "latency"))
        sent[rid] = time.time()
        publisher.publish(topic, data, **attrs).result(timeout=30)
        time.sleep(max(0.0, 1 / LATENCY_RATE - (time.time() - sent[rid])))
    deadline = time.time() + 120
    stored: dict[str, float] = {}
    while len(stored) < LATENCY_EVENTS and time.time() < deadline:
        for doc in db.collection("resources").where(filter=FieldFilter("resourceId", ">=", "lat-")).stream():
            d = doc.to_dict()
            if d["resourceId"].startswith("lat-"):
                stored[d["resourceId"]] = timeutil.parse(d["updatedAt"]).timestamp()
        time.sleep(0.5)
    lat = sorted((stored[k] - sent[k]) * 1000 for k in stored)
    return statistics.median(lat), lat[int(len(lat) * 0.99) - 1]


def detach_fan_out(stack: LocalStack, state) -> None:
    """Stop the consumers of the changed topic: what remains is the pipeline itself."""
    from infra.local.emulators import Process

    subscriber = pubsub_v1.SubscriberClient()
    topo = stack.topology(state)
    for spec in topo.subscriptions:
        if spec.topic_key == "changed":
            subscriber.delete_subscription(subscription=subscriber.subscription_path(state.project, spec.name))
            if spec.push:
                Process(**state.functions[spec.push]).stop()


# What the bench's stack runs as production does, where the local stack's setting serves the e2e tests only
# (infra/local/stack.py LOCAL_SETTINGS): upsert reads the callbacks' summary once per 10 s per instance, not on
# every change (a read per event the minimal handlers do not make, and production does not either).
PRODUCTION_SETTINGS = {"DCM_CALLBACK_VIEW_TTL": "10"}
MINIMAL = {"ingest": "min_ingest", "upsert": "min_upsert"}  # real function -> its minimal reference handler
MIN_TOPICS = {"ingest": "bench-min-ingress", "upsert": "bench-min-normalized", "changed": "bench-min-changed"}
MIN_LEDGER = "bench-min-events"
WARM_UP_EVENTS = 100


def start_minimal(stack: LocalStack, state, groups: dict[str, int]) -> list:
    """The minimal handlers' servers, fed by push subscriptions copied from the real functions' (their
    ordering, ack deadline, dead-letter policy) onto topics of their own; their process groups join
    ``groups``."""
    publisher, subscriber = pubsub_v1.PublisherClient(), pubsub_v1.SubscriberClient()
    for topic in MIN_TOPICS.values():
        publisher.create_topic(name=publisher.topic_path(state.project, topic))
    env = {"MIN_NORMALIZED_TOPIC": MIN_TOPICS["upsert"], "MIN_CHANGED_TOPIC": MIN_TOPICS["changed"],
           "MIN_COLLECTION_PREFIX": "bench-min-"}
    source = Path(__file__).resolve().parent / "minimal_handlers.py"
    started = []
    for spec in stack.topology(state).subscriptions:
        if spec.push not in MINIMAL or spec.topic_key not in ("ingress", "normalized"):
            continue
        proc = stack.start_extra_function(MINIMAL[spec.push], state, source, env)
        started.append(proc)
        groups[MINIMAL[spec.push]] = proc.pid
        real = subscriber.get_subscription(subscription=subscriber.subscription_path(state.project, spec.name))
        copy = pubsub_v1.types.Subscription.deserialize(pubsub_v1.types.Subscription.serialize(real))
        copy.name = subscriber.subscription_path(state.project, f"bench-min-{spec.push}")
        copy.topic = publisher.topic_path(state.project, MIN_TOPICS[spec.push])
        copy.push_config.push_endpoint = (f"http://127.0.0.1:{proc.port}/projects/{state.project}/topics/"
                                          f"{MIN_TOPICS[spec.push]}")
        subscriber.create_subscription(request=copy)
    return started


def against_minimal(db, publisher, state, groups: dict[str, int], real: dict[str, float]) -> tuple[float, float]:
    """The minimal handlers fed the same events as the pipeline was (after a warm-up), and each real
    function's CPU per event against its minimal handler's, as issue 32 states them; returns their events/s
    and the Firestore emulator's CPU ms per event."""
    topic = publisher.topic_path(state.project, MIN_TOPICS["ingest"])
    throughput(db, publisher, topic, "min-warm", WARM_UP_EVENTS, MIN_LEDGER)
    before = cpu_seconds(groups)
    rate = throughput(db, publisher, topic, "min", ledger=MIN_LEDGER)
    spent = cpu_per_event(before, cpu_seconds(groups), THROUGHPUT_EVENTS)
    print(f"minimal handlers, ingest + upsert ({THROUGHPUT_EVENTS} events): {rate:7.1f} events/s")
    show_cpu("minimal handlers", spent)
    for name, minimal in MINIMAL.items():
        ours, least = real.get(name, 0.0), spent.get(minimal, 0.0)
        ratio = f"{ours / least:.1f}x" if least else "n/a"
        print(f"cpu per event, {name}: {ours:.1f} ms = {ratio} the minimal handler ({least:.1f} ms)  [target <= 2x]")
    return rate, spent.get(breakdown.EMULATOR, 0.0)


@contextlib.contextmanager
def bench_stack() -> Iterator[tuple[LocalStack, Any, firestore.Client, pubsub_v1.PublisherClient, list]]:
    """A fresh local stack (one provider, aws) and clients of it; the servers the caller adds to the yielded
    list (the minimal handlers') are stopped with it."""
    with tempfile.TemporaryDirectory() as tmp:
        os.environ.update(PRODUCTION_SETTINGS)
        stack = LocalStack(Path(tmp) / "state", project="dcm-bench")
        state = stack.up(["aws"])
        extra: list = []
        try:
            os.environ.update(stack.client_env(state))
            yield stack, state, firestore.Client(project=state.project), pubsub_v1.PublisherClient(), extra
        finally:
            for proc in extra:
                proc.stop()
            stack.down()


def main() -> None:
    with bench_stack() as (stack, state, db, publisher, extra):
        topic = publisher.topic_path(state.project, "dcm-status-ingress-aws")
        groups = {"pubsub emulator": state.pubsub["pid"], "firestore emulator": state.firestore["pid"],
                  **{name: f["pid"] for name, f in state.functions.items()}}
        cores = os.cpu_count() or 1
        ceiling, spent = fair_ceiling(db, groups)
        print(f"fair ceiling: upsert's Firestore work (2 reads, 3 conditional writes), 2 in flight: "
              f"{ceiling:7.1f} events/s")
        show_cpu("fair ceiling", spent)
        rate = throughput(db, publisher, topic, "full")
        print(f"throughput, all functions ({THROUGHPUT_EVENTS} events, publish -> stored): {rate:7.1f} events/s "
              f"= {rate / ceiling:.0%} of the fair ceiling")
        detach_fan_out(stack, state)
        before = cpu_seconds(groups)
        rate = throughput(db, publisher, topic, "pipe")
        print(f"pipeline throughput, ingest + upsert ({THROUGHPUT_EVENTS} events): {rate:7.1f} events/s "
              f"= {rate / ceiling:.0%} of the fair ceiling (target >= 80%)")
        real = cpu_per_event(before, cpu_seconds(groups), THROUGHPUT_EVENTS)
        total = show_cpu("pipeline", real)
        bound = cores * 1000 / total
        print(f"  on {cores} cores that CPU allows at most {bound:.1f} events/s = {bound / ceiling:.0%} of the "
              f"fair ceiling; measured {rate / bound:.0%} of that bound")
        p50, p99 = latency(db, publisher, topic)
        print(f"publish -> stored latency at {LATENCY_RATE:.0f} events/s: p50 {p50:6.1f} ms   p99 {p99:6.1f} ms"
              "  [target (issue 42): p99 <= 250 ms]")
        rows = breakdown.sweep_variants(stack, state, groups, lambda tag: burst(db, publisher, topic, tag, groups),
                                        cpu_seconds)
        extra.extend(start_minimal(stack, state, groups))
        min_rate, min_emulator = against_minimal(db, publisher, state, groups, real)
        emulator = real.get(breakdown.EMULATOR, 0.0)
        print(f"issue 42: pipeline {rate:.1f} events/s = {rate / min_rate:.0%} of the minimal handlers' {min_rate:.1f} "
              f"[target >= 85%]; Firestore emulator CPU per event {emulator:.1f} ms = {emulator / min_emulator:.2f}x "
              f"the minimal handlers' {min_emulator:.1f} ms [target <= 1.3x]")
        docs = breakdown.documents(db, "pipe-", "bench-min-")
        breakdown.report(rows, min_emulator, breakdown.replays(stack, state, db, groups, cpu_seconds, docs), docs)

if __name__ == "__main__":
    main()
