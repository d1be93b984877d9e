"""The pipeline's scenarios, each on the harness, each a ``Row``: bursts, outages, kills, a hot resource, a
flooding or spoofing provider, cross-provider collisions, and the fuzz run."""

from __future__ import annotations

import ast
import os
import random
import re
import signal
import subprocess
import sys
import threading
import time
import uuid
from concurrent.futures import Future
from datetime import datetime, timedelta, timezone
from pathlib import Path

from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.pubsub_binding import to_message
from dcm_status_contracts.status_report import build_event
from google.cloud.firestore_v1.base_query import FieldFilter

from infra.local.health import answers_http
from infra.local.state import REPO_ROOT
from infra.local.supervise import children, listening
from infra.reliability.harness import Harness
from infra.reliability.accounting import Published, Row
from shared.state.documents import HISTORY_OUTCOMES, LEDGER


def burst(h: Harness, n: int, rng: random.Random) -> Row:
    published, started = Published(), time.monotonic()
    h.burst(published, n, rng, f"b{uuid.uuid4().hex[:6]}")
    return h.row("burst", published, started, timeout=60 + n / 10, note="10% duplicates, 10% reordered, 5% malformed")


def outage(h: Harness, n: int, rng: random.Random, seconds: float, name: str) -> Row:
    published, started = Published(), time.monotonic()
    h.stack.set_firestore_outage(True)
    try:
        h.burst(published, n, rng, f"o{uuid.uuid4().hex[:6]}", duplicates=0.05, malformed=0.0)
        time.sleep(max(0.0, seconds - (time.monotonic() - started)))
    finally:
        h.stack.set_firestore_outage(False)
    note = f"Firestore down {time.monotonic() - started:.0f} s" + replayed(h, published, timeout=90 + n / 10)
    return h.row(name, published, started, timeout=90 + n / 10, note=note)


def replayed(h: Harness, published: Published, timeout: float) -> str:
    """Once the counters settle, what Pub/Sub gave up on (longer than the retry schedule) replayed, as an
    operator does (docs/operations.md#delivery-exhausted): the row's note says how many."""
    h.settle(published, timeout)
    count = replay_exhausted(h)
    published.count += count  # a replay is one more publication to account for
    return f"; {count} delivery_exhausted replayed" if count else ""


def replay_exhausted(h: Harness) -> int:
    from google.cloud import pubsub_v1

    from shared.deadletter.replay import Replayer, ReplayOutcome
    from shared.deadletter.store import DeadLetterStore

    store = DeadLetterStore(h.db)
    subscriber = pubsub_v1.SubscriberClient()
    replayer = Replayer(store, h.publisher, h.state.project,
                        lambda sub: subscriber.get_subscription(subscription=sub).topic)
    ids = h.patiently(lambda: [e["id"] for e in store.query(reason="delivery_exhausted")])
    return sum(h.patiently(lambda i=i: replayer.replay(i)).outcome is ReplayOutcome.PUBLISHED for i in ids)


def killed(h: Harness, n: int, rng: random.Random) -> Row:
    """``kill -9`` each function server once, mid-burst; its keeper restarts it on its port."""
    published, started = Published(), time.monotonic()
    victims = list(h.topo.functions)
    at = {n * (i + 1) // (len(victims) + 1): name for i, name in enumerate(victims)}
    back: dict[str, float] = {}

    def kill(k: int) -> None:
        if k in at:
            pid = h.stack.server_pid(at[k])
            if pid:
                os.kill(pid, signal.SIGKILL)
                threading.Thread(target=time_back, args=(h, at[k], pid, time.monotonic(), back), daemon=True).start()
    h.burst(published, n, rng, f"k{uuid.uuid4().hex[:6]}", during=kill)
    note = replayed(h, published, timeout=90 + n / 10)
    answering = ", ".join(f"{name} {back[name]:.1f} s" if name in back else f"{name} not within {BACK_WITHIN:.0f} s"
                          for name in victims)
    row = h.row("function killed", published, started, timeout=90 + n / 10,
                note=f"kill -9 of each function server mid-burst, answering again after: {answering}{note}")
    row.errors += sum(1 for name in victims if name not in back)
    return row


def time_back(h: Harness, name: str, killed: int, at: float, back: dict[str, float]) -> None:
    """Seconds from ``at`` until function ``name``'s server (no longer pid ``killed``) answers HTTP again, into
    ``back[name]`` (left out when not within ``BACK_WITHIN``)."""
    port = h.state.functions[name]["port"]
    while time.monotonic() - at < BACK_WITHIN:
        server = h.stack.server_pid(name)
        if server not in (None, killed) and listening([server], port) and answers_http(f"127.0.0.1:{port}", timeout=1):
            back[name] = time.monotonic() - at
            return
        time.sleep(0.05)


LOAD_RATE = 60.0  # messages/s of a paced burst: upsert busy on every lane (2 pushes in flight per subscription)
BACK_WITHIN = 60.0  # seconds: a killed process not back by then counts as one error


def _connections(port: int) -> int:
    """Established TCP connections to a local port (pushes in flight or kept alive), from /proc/net/tcp."""
    lines = Path("/proc/net/tcp").read_text().splitlines()[1:]
    return sum(1 for line in lines if (f := line.split()) and int(f[1].split(":")[1], 16) == port and f[3] == "01")


def killed_under_load(h: Harness, n: int, rng: random.Random, target: str) -> Row:
    """``kill -9`` of upsert's server (``target`` "server": the gunicorn master, its keeper restarts it) or of
    its gunicorn worker ("worker": the master respawns it) halfway through a paced burst, while pushes are in
    flight on its port. Measures how soon it answers again (the server) or has a worker again; every message
    must still be accounted for: a push cut mid-request is delivered again (docs/local-stack.md)."""
    name, published, started = "upsert", Published(), time.monotonic()
    port = h.state.functions[name]["port"]
    back: list[float] = []
    seen: dict[str, int] = {}

    def watch(killed: int, at: float) -> None:
        if target == "server":
            answering: dict[str, float] = {}
            time_back(h, name, killed, at, answering)
            back.extend(answering.values())
            return
        while time.monotonic() - at < BACK_WITHIN:
            server = h.stack.server_pid(name)
            if server and [w for w in children(server) if w != killed]:
                back.append(time.monotonic() - at)
                return
            time.sleep(0.05)

    def during(k: int) -> None:
        if k == n // 2:
            deadline = time.monotonic() + 10
            while not (open_ := _connections(port)) and time.monotonic() < deadline:
                time.sleep(0.01)  # pushes in flight on its port
            server = h.stack.server_pid(name)
            victim = server if target == "server" else (children(server) if server else [None])[0]
            if victim:
                seen["in flight"] = open_
                os.kill(victim, signal.SIGKILL)
                threading.Thread(target=watch, args=(victim, time.monotonic()), daemon=True).start()
        time.sleep(max(0.0, (k + 1) / LOAD_RATE - (time.monotonic() - started)))
    h.burst(published, n, rng, f"{target[0]}{uuid.uuid4().hex[:6]}", during=during)
    row = h.row(f"{target} killed under load", published, started, timeout=120 + n / 10)
    again = "answering again" if target == "server" else "a worker again"
    if back:
        row.note = (f"kill -9 of upsert's {'server (gunicorn master)' if target == 'server' else 'gunicorn worker'} "
                    f"mid-burst ({LOAD_RATE:.0f} msg/s), {seen.get('in flight', 0)} connections open on its port; "
                    f"{again} after {back[0]:.1f} s")
    else:
        row.errors += 1
        row.note = f"upsert not {again} within {BACK_WITHIN:.0f} s of the kill"
    return row


def hot_resource(h: Harness, n: int) -> Row:
    published, started = Published(), time.monotonic()
    futures: list[Future] = []
    base = datetime.now(timezone.utc) - timedelta(hours=1)
    rid = f"hot-{uuid.uuid4().hex[:6]}"
    per_second = 100
    for i in range(n):
        h.report(published, "aws", rid, ["RUNNING", "STOPPED"][i % 2], base + timedelta(milliseconds=10 * i),
                 f"{rid}-{i}", futures)
        if i % per_second == per_second - 1:
            time.sleep(max(0.0, (i + 1) / per_second - (time.monotonic() - started)))
    for f in futures:
        f.result(timeout=120)
    burst = time.monotonic() - started
    row = h.row("hot resource", published, started, timeout=120 + n / 10)
    ref = h.db.collection("resources").document(ResourceKey("aws", "vm", rid).doc_id)
    writes = (ref.get().to_dict() or {}).get("documentWrites", 0)
    history = (h.db.collection(LEDGER).where(filter=FieldFilter("key", "==", f"aws/vm/{rid}"))  # its history:
               .where(filter=FieldFilter("outcome", "in", sorted(HISTORY_OUTCOMES)))  # its ledger entries that
               .count().get()[0][0].value)  # carry it (issue 32)
    row.lost += abs(history - (row.applied + row.stale))  # every update that changed something is in history
    row.note = (f"{n} updates of one resource, {per_second}/s for {burst:.1f} s: its document written {writes} times "
                f"({writes / row.seconds:.1f}/s over the row), history {history} = applied + stale")
    return row


def flooding(h: Harness, n: int, rng: random.Random) -> Row:
    """A flooding provider next to a quiet one: the quiet one's updates still land (latency measured)."""
    published, started = Published(), time.monotonic()
    quiet: list[tuple[str, float]] = []
    tag = f"f{uuid.uuid4().hex[:6]}"

    def quietly(k: int) -> None:
        if k % max(1, n // 20) == 0:
            futures: list[Future] = []
            rid = f"{tag}-quiet-{k}"
            h.report(published, "vmware", rid, "RUNNING", datetime.now(timezone.utc), f"{rid}-0", futures,
                     rtype="volume")
            futures[0].result(timeout=60)
            quiet.append((f"vmware/volume/{rid}", time.monotonic()))
    h.burst(published, n, rng, tag, providers=["aws"], duplicates=0.0, reorder=0.0, malformed=0.0, during=quietly)
    latencies = []
    for key, sent in quiet:
        ref = h.db.collection("resources").document(ResourceKey.parse(key).doc_id)
        while not ref.get().exists and time.monotonic() - sent < 120:
            time.sleep(0.2)
        latencies.append(time.monotonic() - sent)
    row = h.row("flooding provider", published, started, timeout=60 + n / 10)
    latencies.sort()
    row.note = (f"aws floods; {len(quiet)} vmware updates stored within "
                f"{latencies[len(latencies) // 2]:.1f} s (median) / {latencies[-1]:.1f} s (max)")
    return row


def spoofing(h: Harness, n: int) -> Row:
    published, started = Published(), time.monotonic()
    pending = []
    for i in range(n):  # azure's events, published on aws's topic
        event = build_event("azure", "vm", f"spoof-{i}", "RUNNING", "not mine", event_id=f"spoof-{uuid.uuid4().hex}")
        data, attrs = to_message(event)
        pending.append((h.topo.topic("ingress", "aws"), h.publisher.publish(h.topic("aws"), data, **attrs)))
        published.count += 1
    published.invalid += [(t, f.result(timeout=60)) for t, f in pending]
    row = h.row("spoofed provider", published, started, timeout=60 + n / 10)
    applied = sum(1 for _ in h.db.collection("resources").stream())
    row.wrong += applied
    row.note = f"{applied} applied; every one dead-lettered as provider_mismatch" if not applied else "APPLIED"
    row.note += "; " + push_auth()
    return row


def collisions(h: Harness, n: int, rng: random.Random) -> Row:
    """Two providers report under one CloudEvent source and the same ids, each on its own topic (issue 25,
    item 1: a provider must not be able to have another's event taken for a duplicate), in random order,
    each event the first report of its resource, 10% of them published twice by their provider: every
    event of both is applied, only the second publications are duplicates."""
    published, started = Published(), time.monotonic()
    tag = f"x{uuid.uuid4().hex[:6]}"
    source, base = f"shared-source-{tag}", datetime.now(timezone.utc) - timedelta(hours=1)
    futures: list[Future] = []
    for i in range(max(1, n // 2)):
        pair = ["aws", "azure"]
        rng.shuffle(pair)
        for provider in pair:
            for _ in range(2 if rng.random() < 0.10 else 1):
                h.report(published, provider, f"{tag}-{i}", "RUNNING", base + timedelta(milliseconds=i), f"{tag}-{i}",
                         futures, source=source)
    for f in futures:
        f.result(timeout=120)
    row = h.row("cross-provider collisions", published, started, timeout=60 + n / 10)
    distinct = len(published.events)
    row.lost += max(0, distinct - row.applied)  # an event of either provider not applied: lost to a collision
    row.note = (f"aws and azure, one source, {distinct // 2} shared ids ({distinct} events, each its resource's "
                f"first): {row.applied} applied; {row.duplicate} duplicates = the {row.published - distinct} "
                f"second publications")
    if row.duplicate != row.published - distinct:
        row.wrong += abs(row.duplicate - (row.published - distinct))
    return row


def push_auth() -> str:
    """Production mode (no DCM_LOCAL_MODE): a push without a token, or with a forged one, is refused."""
    code = r"""
import os, sys
os.environ.pop("DCM_LOCAL_MODE", None)
os.environ.update(DCM_PROJECT="p", DCM_PUSH_AUDIENCE="https://ingest.example",
                  DCM_PUSH_SERVICE_ACCOUNT="invoker@p.iam.gserviceaccount.com")
from functions_framework import create_app
app = create_app("ingest", "functions/ingest/main.py", "cloudevent").test_client()
body = {"message": {"data": "e30=", "messageId": "1"}, "subscription": "s"}
codes = [app.post("/projects/p/topics/t", json=body, headers=h).status_code
         for h in ({}, {"Authorization": "Bearer forged.token.here"}, {"Authorization": "Basic x"})]
print(" ".join(map(str, codes)))
"""
    out = subprocess.run([sys.executable, "-c", code], cwd=REPO_ROOT, capture_output=True, text=True, timeout=120,
                         env={k: v for k, v in os.environ.items() if k != "DCM_LOCAL_MODE"})
    codes = out.stdout.strip().split()[-3:] if out.returncode == 0 else ["error"]
    return f"push auth: missing/forged/wrong-scheme tokens -> {'/'.join(codes)}"


def fuzz(n: int) -> Row:
    started = time.monotonic()
    env = {**os.environ, "DCM_FUZZ_EXAMPLES": str(n)}
    out = subprocess.run([sys.executable, "-m", "pytest", "-q", "-s", "-p", "no:cacheprovider",
                          "tests/functional/test_fuzz.py"], cwd=REPO_ROOT, env=env, capture_output=True, text=True,
                         timeout=3600)
    tally = re.search(r"fuzz: (\{.*\})", out.stdout)
    counts = ast.literal_eval(tally.group(1)) if tally else {}
    failed = re.search(r"(\d+) failed", out.stdout)
    if out.returncode != 0:
        keep_failures(out.stdout + out.stderr)
    row = Row("fuzz (hypothesis)", counts.get("ingest inputs", 0) + counts.get("upsert inputs", 0),
              errors=int(failed.group(1)) if failed else (0 if out.returncode == 0 else 1),
              seconds=time.monotonic() - started)
    row.deadlettered = counts.get("dead-lettered", 0) + counts.get("upsert dead-lettered", 0)
    row.applied = counts.get("forwarded", 0) + counts.get("upsert acked", 0)
    row.note = (f"{counts.get('ingest inputs', 0)} mutated events through ingest->upsert->deadletter, "
                f"{counts.get('upsert inputs', 0)} mutated internal messages into upsert; every one acked"
                + (f" ({counts['redelivered after 503']} after a 503 redelivered)"
                   if counts.get("redelivered after 503") else ""))
    return row


FUZZ_LOG = REPO_ROOT / "build" / "reliability-fuzz.log"


def keep_failures(output: str) -> None:
    """A failing fuzz run's whole output in ``FUZZ_LOG``; its failures (the falsifying examples and the
    summary) on stderr."""
    FUZZ_LOG.parent.mkdir(parents=True, exist_ok=True)
    FUZZ_LOG.write_text(output)
    said = [line for line in output.splitlines() if line.startswith(("E ", "FAILED", "Falsifying"))
            or "Falsifying example" in line]
    print("\n".join([f"fuzz failed: its output is in {FUZZ_LOG}", *said[-40:]]), file=sys.stderr)
