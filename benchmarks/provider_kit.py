"""Provider kit figures against the real Pub/Sub emulator, in one run:

1. publish throughput (events/s, one process) and publish latency (report() until the topic
   accepted it: p50/p99) of ``dcm_status_sdk.Reporter`` with batching, N distinct resources as
   fast as one thread reports them, then at a steady 1,000 reports/s;
2. the fair ceiling, measured the same way in the same run: the bare Pub/Sub client publishing
   the same already-built messages with the same batch settings and no ordering key, no checks,
   no debounce, no sequence;
3. what the kit's own per-report work costs (build, ingest's checks, sequence, queueing) with a
   publisher that does nothing: the part of (1) that is ours.

Prints figures; asserts nothing (run: make bench).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from concurrent.futures import Future
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "sdk"))

from dcm_status_contracts.pubsub_binding import to_message  # noqa: E402
from dcm_status_contracts.status_report import ReportForm, build_event  # noqa: E402
from dcm_status_sdk import Reporter, ReporterConfig  # noqa: E402
from google.cloud import pubsub_v1  # noqa: E402

from infra.local import emulators  # noqa: E402

EVENTS = int(os.environ.get("BENCH_KIT_EVENTS", "5000"))
PROJECT = "bench-kit"
TOPIC = "dcm-status-ingress-aws"
PACE = 1000  # reports/s for the latency figure under a steady load
BATCH = dict(max_messages=100, max_latency=0.01)


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def latency(ms: list[float]) -> str:
    return f"p50 {statistics.median(ms):.1f} ms, p99 {pct(ms, 0.99):.1f} ms"


class Null:
    def topic_path(self, project: str, topic: str) -> str:
        return f"projects/{project}/topics/{topic}"

    def publish(self, topic, data, ordering_key="", **kw) -> Future:
        future: Future = Future()
        future.set_result("1")
        return future

    def resume_publish(self, topic: str, key: str) -> None:
        pass

    def stop(self) -> None:
        pass


def kit_run(publisher, n: int, per_second: float | None = None) -> tuple[float, str]:
    """``publisher`` None: the reporter's own client (one Publish RPC per batch of resources);
    ``per_second``: report at that pace instead of as fast as possible."""
    reporter = Reporter(ReporterConfig(project=PROJECT, provider="aws", debounce_seconds=0,
                                       batch_max_messages=BATCH["max_messages"]), publisher=publisher)
    t0 = time.perf_counter()
    for i in range(n):
        if per_second:
            time.sleep(max(0.0, t0 + i / per_second - time.perf_counter()))
        reporter.report("vm", f"i-{i}", "RUNNING" if i % 2 else "STOPPED", "bench")
    reporter.close(timeout=120)
    stats = reporter.stats()
    return n / (time.perf_counter() - t0), f"p50 {stats.latency_p50_ms:.1f} ms, p99 {stats.latency_p99_ms:.1f} ms"


def bare_run(publisher, n: int, keyed: bool = False) -> tuple[float, list[float]]:
    topic = publisher.topic_path(PROJECT, TOPIC)
    messages = [to_message(build_event("aws", "vm", f"i-{i}", "RUNNING", "bench", form=ReportForm.CURRENT))
                for i in range(n)]
    ms: list[float] = []
    lock = threading.Lock()
    t0 = time.perf_counter()
    futures = []
    for data, attrs in messages:
        started = time.perf_counter()
        future = publisher.publish(topic, data, ordering_key=f"aws/vm/{len(futures)}" if keyed else "", **attrs)

        def done(_f, s=started):
            with lock:
                ms.append((time.perf_counter() - s) * 1000)
        future.add_done_callback(done)
        futures.append(future)
    for f in futures:
        f.result(timeout=120)
    return n / (time.perf_counter() - t0), ms


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        pubsub = emulators.start("pubsub", Path(tmp))
        os.environ["PUBSUB_EMULATOR_HOST"] = pubsub.host
        try:
            admin = pubsub_v1.PublisherClient()
            admin.create_topic(name=admin.topic_path(PROJECT, TOPIC))
            bare = pubsub_v1.PublisherClient(batch_settings=pubsub_v1.types.BatchSettings(**BATCH))
            ordered = pubsub_v1.PublisherClient(
                batch_settings=pubsub_v1.types.BatchSettings(**BATCH),
                publisher_options=pubsub_v1.types.PublisherOptions(enable_message_ordering=True))
            bare_run(bare, 200)  # warm up
            kit_run(None, 200)
            ceiling, ceiling_ms = bare_run(bare, EVENTS)
            rate, figures = kit_run(None, EVENTS)
            per_key, per_key_ms = bare_run(ordered, EVENTS, keyed=True)
            own, _ = kit_run(Null(), EVENTS)
            _, paced = kit_run(None, PACE * 3, per_second=PACE)
            print(f"provider kit, {EVENTS} reports of {EVENTS} resources, one process, Pub/Sub emulator, batches of "
                  f"up to {BATCH['max_messages']} (the bare client waits up to {BATCH['max_latency'] * 1000:.0f} ms "
                  "to fill one):")
            print(f"  Reporter (checks, sequence, ordering key per resource): {rate:,.0f} events/s, "
                  f"report -> accepted {figures}")
            print(f"  Reporter at a steady {PACE:,} reports/s for 3 s: report -> accepted {paced}")
            print(f"  ceiling, bare Pub/Sub client (same messages, no ordering key): {ceiling:,.0f} events/s, "
                  f"{latency(ceiling_ms)}  -> the kit reaches {rate / ceiling:.0%} of it")
            print(f"  (the client library's own batching with an ordering key per resource: {per_key:,.0f} events/s, "
                  f"{latency(per_key_ms)}: one RPC per resource, which is why the kit batches across resources)")
            print(f"  the kit's own work per report (null publisher): {own:,.0f} reports/s "
                  f"({1e6 / own:.0f} us per report)")
        finally:
            pubsub.stop()


if __name__ == "__main__":
    main()
