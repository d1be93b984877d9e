"""Fairness between providers, on the emulators, in one run on a fresh local stack.

A quiet provider (vmware) reports QUIET_RATE new resources a second, each timed from its publish to
the moment upsert stored it (the document's ``updatedAt``, the same machine's clock):

1. alone;
2. next to a provider (aws) reporting ten times its rate;
3. next to a provider flooding as fast as one process publishes (FLOOD_EVENTS at once): far beyond
   what the pipeline drains, the worst case a neighbour can make.

Prints p50/p99/max of each, and how long the flood took to drain. Asserts nothing (run: make bench).
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from dcm_status_contracts import timeutil  # noqa: E402
from dcm_status_contracts.pubsub_binding import to_message  # noqa: E402
from dcm_status_contracts.status_report import build_event  # noqa: E402
from google.cloud import firestore, pubsub_v1  # noqa: E402
from google.cloud.firestore_v1.base_query import FieldFilter  # noqa: E402

from infra.local.stack import LocalStack  # noqa: E402

QUIET, LOUD = "vmware", "aws"
QUIET_RATE = 5.0  # new resources a second
SECONDS = float(os.environ.get("BENCH_FAIRNESS_SECONDS", "20"))
FLOOD_EVENTS = int(os.environ.get("BENCH_FLOOD_EVENTS", "2000"))


def paced(publisher, topic: str, provider: str, tag: str, rate: float, seconds: float) -> dict[str, float]:
    """Publish ``rate`` new resources a second for ``seconds``; {resourceId: publish time}."""
    sent: dict[str, float] = {}
    start = time.time()
    for i in range(int(rate * seconds)):
        rid = f"{tag}-{i}"
        data, attrs = to_message(build_event(provider, "vm", rid, "RUNNING", "fairness"))
        sent[rid] = time.time()
        publisher.publish(topic, data, **attrs).result(timeout=60)
        time.sleep(max(0.0, start + (i + 1) / rate - time.time()))
    return sent


def flood(publisher, topic: str, tag: str, n: int) -> None:
    messages = [to_message(build_event(LOUD, "vm", f"{tag}-{i}", "RUNNING", "flood")) for i in range(n)]
    futures = [publisher.publish(topic, data, **attrs) for data, attrs in messages]
    for f in futures:
        f.result(timeout=120)


def stored_at(db, provider: str, tag: str, want: int, timeout: float = 300) -> dict[str, float]:
    """{resourceId: when upsert stored it} for the resources of ``tag``, once all ``want`` are there."""
    deadline = time.time() + timeout
    while True:
        query = (db.collection("resources").where(filter=FieldFilter("provider", "==", provider))
                 .where(filter=FieldFilter("resourceId", ">=", f"{tag}-")).where(
                     filter=FieldFilter("resourceId", "<", f"{tag}-\uf8ff")).select(["resourceId", "updatedAt"]))
        got = {d["resourceId"]: timeutil.parse(d["updatedAt"]).timestamp() for d in (s.to_dict() for s in query.stream())}
        if len(got) >= want or time.time() > deadline:
            return got
        time.sleep(1.0)


def figures(sent: dict[str, float], stored: dict[str, float]) -> str:
    lat = sorted((stored[k] - sent[k]) * 1000 for k in sent if k in stored)
    missing = len(sent) - len(lat)
    p99 = lat[max(0, int(len(lat) * 0.99) - 1)]
    return (f"p50 {statistics.median(lat):7.0f} ms   p99 {p99:7.0f} ms   max {lat[-1]:7.0f} ms"
            + (f"   ({missing} not stored)" if missing else ""))


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        stack = LocalStack(Path(tmp) / "state", project="dcm-bench")
        state = stack.up([LOUD, QUIET])
        try:
            os.environ.update(stack.client_env(state))
            db = firestore.Client(project=state.project)
            publisher = pubsub_v1.PublisherClient()
            quiet = publisher.topic_path(state.project, f"dcm-status-ingress-{QUIET}")
            loud = publisher.topic_path(state.project, f"dcm-status-ingress-{LOUD}")
            print(f"quiet provider {QUIET}: {QUIET_RATE:.0f} new resources/s for {SECONDS:.0f} s; "
                  "publish -> stored:")

            sent = paced(publisher, quiet, QUIET, "alone", QUIET_RATE, SECONDS)
            print(f"  alone:                              {figures(sent, stored_at(db, QUIET, 'alone', len(sent)))}")

            neighbour = threading.Thread(target=paced, args=(publisher, loud, LOUD, "tenfold", 10 * QUIET_RATE,
                                                             SECONDS))
            neighbour.start()
            sent = paced(publisher, quiet, QUIET, "beside", QUIET_RATE, SECONDS)
            neighbour.join()
            print(f"  beside {LOUD} at 10x its rate:        {figures(sent, stored_at(db, QUIET, 'beside', len(sent)))}")

            started = time.time()
            flooding = threading.Thread(target=flood, args=(publisher, loud, "flood", FLOOD_EVENTS))
            flooding.start()
            sent = paced(publisher, quiet, QUIET, "flooded", QUIET_RATE, SECONDS)
            flooding.join()
            print(f"  beside {LOUD} flooding {FLOOD_EVENTS} at once: "
                  f"{figures(sent, stored_at(db, QUIET, 'flooded', len(sent)))}")
            drained = stored_at(db, LOUD, "flood", FLOOD_EVENTS, timeout=600)
            print(f"  (the flood: {len(drained)} stored, the last {max(drained.values()) - started:.1f} s after it began)")
        finally:
            stack.down()


if __name__ == "__main__":
    main()
