"""Webhook callback figures on a fresh local stack (emulators + functions-framework), in one run:

1. change -> callback received, p50/p99: a provider's publish until a receiver on loopback has
   the signed delivery, against publish -> committed (the pipeline up to the change, polled in
   Firestore: the ceiling for anything told of a change);
2. deliveries/s to 10 receivers at once, one of them down (connection refused) for the whole
   run: a burst of changes every receiver's filter matches, until the 9 healthy receivers have
   every delivery, against the fair ceiling: notify's own work per delivery (read the callback
   and whether it was delivered, sign, POST, record) run in this process at the concurrency the
   emulator pushes with (2 requests per subscription: the first lane; both lanes: 4), without
   Pub/Sub.

Prints figures; asserts nothing (run: make bench).
"""

from __future__ import annotations

import logging
import os
import statistics
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import requests  # noqa: E402
from dcm_status_contracts import change_feed, timeutil  # noqa: E402
from dcm_status_contracts.delivery import Delivery  # noqa: E402
from dcm_status_contracts.model import PubSubMessage  # noqa: E402
from dcm_status_sdk import Reporter, ReporterConfig  # noqa: E402
from google.cloud import firestore, pubsub_v1  # noqa: E402
from google.cloud.firestore_v1.base_query import FieldFilter  # noqa: E402

from infra.local import emulators  # noqa: E402
from infra.local.receiver import Receiver  # noqa: E402
from infra.local.stack import LocalStack  # noqa: E402
from shared.callbacks.store import CallbackStore  # noqa: E402
from shared.notify.handler import Notify  # noqa: E402
from shared.runtime import settings  # noqa: E402

LATENCY_SAMPLES = int(os.environ.get("BENCH_CALLBACK_SAMPLES", "100"))
BURST = int(os.environ.get("BENCH_CALLBACK_BURST", "200"))
RECEIVERS = 10


def pct(values: list[float], q: float) -> float:
    return sorted(values)[min(len(values) - 1, int(q * len(values)))]


def figure(ms: list[float]) -> str:
    return f"p50 {statistics.median(ms):.0f} ms, p99 {pct(ms, 0.99):.0f} ms" if ms else "no sample"


def register(api: str, hook: str, tenant: str) -> dict:
    response = requests.post(api + "v1/callbacks", json={"hook": hook, "filter": {"label": f"tenant:{tenant}"}},
                             headers={"DCM-Request": "1"}, timeout=30)
    response.raise_for_status()
    return response.json()


def latency(api: str, reporter: Reporter, db: firestore.Client, receiver: Receiver) -> None:
    created = register(api, receiver.url("lat"), "bench-lat")
    hook = receiver.hook("lat", secret=created["secret"])
    published, committed = {}, {}
    for i in range(LATENCY_SAMPLES):
        rid = f"lat-{i}"
        published[rid] = time.time()
        reporter.publish_now("vm", rid, "RUNNING", "up", metadata={"tenant": "bench-lat"}).result(timeout=30)
        ref = db.collection("resources").document(f"aws~vm~{rid}")
        while not ref.get().exists:
            time.sleep(0.002)
        committed[rid] = time.time()
        deadline = time.time() + 30
        while not any(r.body["resource"]["resourceId"] == rid for r in hook.got) and time.time() < deadline:
            time.sleep(0.002)
    arrived = {r.body["resource"]["resourceId"]: r.at for r in hook.got if r.verified}
    seen = [rid for rid in published if rid in arrived]
    print(f"  change -> callback received ({len(seen)}/{LATENCY_SAMPLES}, signatures verified): "
          f"{figure([(arrived[r] - published[r]) * 1000 for r in seen])}; publish -> committed (ceiling): "
          f"{figure([(committed[r] - published[r]) * 1000 for r in published])}; committed -> received: "
          f"{figure([max(0.0, arrived[r] - committed[r]) * 1000 for r in seen])}")


def throughput(api: str, reporter: Reporter, db: firestore.Client, receiver: Receiver,
               stack_settings: settings.Settings) -> None:
    down_port = emulators.free_port()  # nothing listens: connection refused, every time
    created = [register(api, receiver.url(f"tp{n}"), "bench-tp") for n in range(RECEIVERS - 1)]
    down = register(api, f"http://127.0.0.1:{down_port}/down", "bench-tp")
    hooks = [receiver.hook(f"tp{n}", secret=c["secret"]) for n, c in enumerate(created)]
    expected = BURST * len(hooks)
    start = time.time()
    futures = [reporter.publish_now("vm", f"tp-{i}", "RUNNING", "up", metadata={"tenant": "bench-tp"})
               for i in range(BURST)]
    for f in futures:
        f.result(timeout=60)
    deadline = time.time() + 600
    while sum(len(h.got) for h in hooks) < expected and time.time() < deadline:
        time.sleep(0.05)
    got = sum(len(h.got) for h in hooks)
    elapsed = max(r.at for h in hooks for r in h.got) - start
    down_stats = requests.get(api + f"v1/callbacks/{down['callback']['id']}", timeout=30).json()["callback"]["stats"]
    rate = got / elapsed
    print(f"  {RECEIVERS} receivers, 1 down (refused), burst of {BURST} changes: {got}/{expected} deliveries to the "
          f"9 healthy ones in {elapsed:.1f} s = {rate:,.0f} deliveries/s; the down one: "
          f"{down_stats['failedAttempts']} failed attempts, {down_stats['delivered']} delivered")
    for threads in (2, 4):  # the first lane's push concurrency on the emulator; both lanes'
        ceiling = direct_ceiling(db, stack_settings, created, threads)
        print(f"    ceiling: notify's own work per delivery, in-process, {threads} at a time: "
              f"{ceiling:,.0f} deliveries/s; the pipeline reached {100 * rate / ceiling:.0f}% of it")


def direct_ceiling(db: firestore.Client, stack_settings: settings.Settings, created: list[dict],
                   threads: int) -> float:
    """Notify's work per delivery (read the callback, sign + POST, record) in this process."""
    store = CallbackStore(db)
    notify = Notify(store, None, stack_settings)  # the retry lane publishes nothing: no publisher
    items = list(db.collection("events").where(filter=FieldFilter("provider", "==", "aws")).limit(BURST).stream())
    messages = []
    for n, snap in enumerate(items):
        data = snap.to_dict()
        if not data.get("change"):
            continue
        item = change_feed.item(snap.id, data["committedAt"], data["change"])
        for c in created:
            d = Delivery(c["callback"]["id"], {**item, "id": f"ceiling{threads}-{n}-{item['id']}"},
                         timeutil.now_str())
            body, attributes = d.to_message()
            messages.append(PubSubMessage(body, attributes, "m", None, stack_settings.topic_callbacks_retry))
    t = time.perf_counter()
    with ThreadPoolExecutor(threads) as pool:
        list(pool.map(notify.retry_lane, messages))
    return len(messages) / (time.perf_counter() - t)


def main() -> None:
    logging.getLogger("dcm").setLevel(logging.ERROR)  # the in-process ceiling's per-delivery log lines
    with tempfile.TemporaryDirectory() as tmp:
        stack = LocalStack(Path(tmp) / "state", project="dcm-bench-callbacks")
        state = stack.up(["aws"])
        receiver = Receiver()
        try:
            os.environ.update(stack.client_env(state))
            db = firestore.Client(project=state.project)
            api = stack.function_url(state, "api")
            reporter = Reporter(ReporterConfig(state.project, "aws"), pubsub_v1.PublisherClient())
            stack_settings = settings.from_env({**stack.function_env(state)})
            print(f"callback benchmark ({LATENCY_SAMPLES} changes one at a time; a burst of {BURST})")
            latency(api, reporter, db, receiver)
            throughput(api, reporter, db, receiver, stack_settings)
            reporter.close()
        finally:
            receiver.close()
            stack.down()


if __name__ == "__main__":
    main()
