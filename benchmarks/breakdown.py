"""Where the Firestore emulator's CPU per event goes (issue 42), measured in one run by benchmarks/pipeline.py:

1. the same burst of new resources through ingest + upsert (fan-out detached) three times: with the sweep as the
   stack runs it, with the sweep's aggregates (summary and accounting snapshots, trends) off, and with the sweep
   stopped: what the sweep's work beside the burst costs the emulator, per event;
2. upsert's own Firestore calls replayed from this process, 2 in flight (the emulator's push concurrency), with the
   documents the pipeline wrote (a stored resource and its ledger entry, copied) and with the minimal handler's:
   the reads alone, the writes alone, both; what the documents' size costs;
3. the documents themselves: bytes, fields, and the index entries one write of each makes in production (every
   field a single-field index keeps, both directions; arrays once per element; the composite indexes of
   terraform/data_model.tf it falls in). The emulator keeps no index and honours no exemption (its admin field
   API answers 501, as for TTL policies): there the index entries cost nothing and a document's size is all.

Prints the table; asserts nothing.
"""

from __future__ import annotations

import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any, Callable, Mapping

import orjson
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.state.documents import CALLBACK_SUMMARY, LEDGER, RESOURCES, SEQUENTIAL_FIELDS, SUMMARIES, UNFILTERED_FIELDS

BURST = int(os.environ.get("BENCH_BREAKDOWN_EVENTS", "600"))
REPLAYS = 300
EMULATOR = "firestore emulator"
AGGREGATES_OFF = {"DCM_SUMMARY_EVERY_SECONDS": "100000000", "DCM_STATS_EVERY_SECONDS": "100000000",
                  "DCM_TRENDS_EVERY_SECONDS": "0"}
ROUNDS = int(os.environ.get("BENCH_BREAKDOWN_ROUNDS", "2"))
VARIANTS = ("pipeline burst, sweep as the stack runs it", "  ... sweep without its aggregates (snapshots, trends)",
            "  ... sweep stopped")
IDLE = ": idle, ms per second (not per event)"
IDLE_SECONDS = 15.0
DATA_MODEL = Path(__file__).resolve().parent.parent / "terraform" / "data_model.tf"


def sweep_variants(stack, state, groups: dict[str, int], burst: Callable[[str], float],
                   cpu: Callable[[dict[str, int]], dict[str, float]], rounds: int = ROUNDS) -> list[tuple[str, float]]:
    """The emulator's CPU ms per event of the same burst, then its CPU ms per second idle (no event: what the
    sweep costs whatever the rate, which a slower burst pays more of per event): sweep as run, its aggregates
    off, sweep stopped, each ``rounds`` times in turn (garbage collections and the machine's other load land in
    one burst or another: a variant's lowest is its figure, each printed). The sweep is left as the stack runs
    it."""
    from infra.local.emulators import Process

    got: dict[str, list[float]] = {label + kind: [] for kind in ("", IDLE) for label in VARIANTS}
    for r in range(rounds):
        for i, label in enumerate(VARIANTS):
            if i == 1:
                stack.restart_functions(state, ["sweep"], AGGREGATES_OFF)
                groups["sweep"] = state.functions["sweep"]["pid"]
            elif i == 2:
                Process(**state.functions["sweep"]).stop()
            got[label].append(burst(f"bd{r}-{i}"))
            got[label + IDLE].append(idle(groups, cpu))
        stack.restart_functions(state, ["sweep"])
        groups["sweep"] = state.functions["sweep"]["pid"]
    rows = [(f"{label} ({', '.join(f'{v:.1f}' for v in values)})", min(values)) for label, values in got.items()]
    print("the Firestore emulator's CPU, the same burst beside the sweep (printed again below):")
    show_rows(rows)
    return rows


def idle(groups: dict[str, int], cpu: Callable[[dict[str, int]], dict[str, float]]) -> float:
    """The emulator's CPU ms per second over ``IDLE_SECONDS`` without events."""
    before = cpu(groups)
    time.sleep(IDLE_SECONDS)
    return (cpu(groups)[EMULATOR] - before[EMULATOR]) * 1000 / IDLE_SECONDS


def _sample(db: firestore.Client, collection: str, prefix: str | None = None) -> dict[str, Any]:
    """One document of ``collection`` (of the burst ``prefix`` names)."""
    query: Any = db.collection(collection)
    if prefix is not None:
        field, value = ("resourceId", prefix) if collection == RESOURCES else ("key", f"aws/vm/{prefix}")
        query = query.where(filter=FieldFilter(field, ">=", value))
    return next(query.limit(1).stream()).to_dict()


def replay(db: firestore.Client, groups: dict[str, int], cpu: Callable[[dict[str, int]], dict[str, float]],
           resource: Mapping[str, Any], entry: Mapping[str, Any], reads: bool, writes: bool, tag: str) -> float:
    """Upsert's calls for a new resource (read the resource and the callbacks' summary; create the ledger entry
    and the resource in one batch) with these documents, ``REPLAYS`` times, 2 in flight: emulator CPU ms each."""
    summary = db.collection(SUMMARIES).document(CALLBACK_SUMMARY)

    def one(i: int) -> None:
        ref = db.collection(f"bd-{tag}-res").document(f"r{i}")
        if reads:
            ref.get()
            summary.get()
        if writes:
            batch = db.batch()
            batch.create(db.collection(f"bd-{tag}-events").document(f"e{i}"), dict(entry))
            batch.create(ref, dict(resource))
            batch.commit()

    with ThreadPoolExecutor(2) as pool:
        list(pool.map(one, range(-50, 0)))  # warm-up
        before = cpu(groups)
        list(pool.map(one, range(REPLAYS)))
        after = cpu(groups)
    return (after[EMULATOR] - before[EMULATOR]) * 1000 / REPLAYS


def leaves(doc: Mapping[str, Any], prefix: str = "") -> list[tuple[str, bool]]:
    """(dotted path, is an array element) of every value a single-field index holds: each scalar, each map's
    subfields (and the map itself), each array element."""
    out: list[tuple[str, bool]] = []
    for k, v in doc.items():
        path = f"{prefix}{k}"
        if isinstance(v, Mapping):
            out.append((path, False))
            out += leaves(v, path + ".")
        elif isinstance(v, list):
            out += [(path, True)] * len(v)
            out.append((path, False))
        else:
            out.append((path, False))
    return out


def _composites(collection: str) -> list[tuple[list[str], str, int]]:
    """(equality fields, order field, orders) of each composite index spec of terraform/data_model.tf."""
    text = DATA_MODEL.read_text()
    filters = re.search(r'resource_filter_fields = \[([^\]]*)\]', text).group(1)
    specs = []
    for line in re.findall(r'\{ collection = "%s",[^\n]*\}' % collection, text):
        eq = re.search(r'equality = (\[[^\]]*\]|local\.\w+)', line).group(1)
        fields = re.findall(r'"([^"]+)"', filters if "resource_filter" in eq else eq)
        if "stale_shard" in eq:
            fields = ["staleShard"]
        order = re.search(r'order_by = "([^"]+)"', line).group(1)
        sharded = "sharded = true" in line
        for f in fields:
            specs.append(([f, "shard"] if sharded else [f], order, len(re.findall(r'CENDING"', line))))
    return specs


def index_entries(collection: str, doc: Mapping[str, Any], exempt: tuple[str, ...]) -> tuple[int, int]:
    """Single-field and composite index entries one write of ``doc`` makes in production (a new document; an
    update rewrites those of the fields it changes)."""
    def exempted(path: str) -> bool:
        return any(path == e or path.startswith(e + ".") for e in exempt)

    single = sum(1 if element else 2 for path, element in leaves(doc) if not exempted(path))
    composite = sum(n for fields, order, n in _composites(collection)
                    if all(_has(doc, f) for f in (*fields, order)))
    return single, composite


def _has(doc: Mapping[str, Any], path: str) -> bool:
    for part in path.split("."):
        if not isinstance(doc, Mapping) or part not in doc:
            return False
        doc = doc[part]
    return True


def exemptions(collection: str, unfiltered: bool = True) -> tuple[str, ...]:
    """The fields of ``collection`` whose single-field indexes are exempted: the sequential ones and the TTL
    field, and (``unfiltered``, issue 42) those no query filters on."""
    return (*SEQUENTIAL_FIELDS.get(collection, {}), "expireAt",
            *(UNFILTERED_FIELDS.get(collection, ()) if unfiltered else ()))


def documents(db: firestore.Client, prefix: str, min_prefix: str) -> dict[str, tuple[str, dict[str, Any]]]:
    """The documents one new resource's update writes: the pipeline's and the minimal handler's."""
    return {
        "pipeline resource": (RESOURCES, _sample(db, RESOURCES, prefix)),
        "pipeline ledger entry (= history)": (LEDGER, _sample(db, LEDGER, prefix)),
        "minimal resource (= history entry)": (RESOURCES, _sample(db, f"{min_prefix}{RESOURCES}")),
        "minimal ledger entry": (LEDGER, {"outcome": "applied", "key": "aws~vm~min-0", "eventId": "0" * 36}),
    }


def shapes(docs: Mapping[str, tuple[str, dict[str, Any]]]) -> list[str]:
    lines = [f"  {'document':<36} {'bytes':>6} {'fields':>6}   index entries a write makes in production "
             "(single-field + composite): sequential fields exempted / and the unfiltered ones (issue 42)"]
    for name, (collection, doc) in docs.items():
        single, composite = index_entries(collection, doc, exemptions(collection, unfiltered=False))
        now, _ = index_entries(collection, doc, exemptions(collection))
        size = len(orjson.dumps(doc, default=str))
        lines.append(f"  {name:<36} {size:>6} {len(leaves(doc)):>6}   {single:>4} + {composite} / {now:>4} + {composite}")
    return lines


def show_rows(rows: list[tuple[str, float]], minimal: float | None = None) -> None:
    for label, ms in rows:
        ratio = f"  = {ms / minimal:.2f}x the minimal handlers'" if minimal and IDLE not in label else ""
        print(f"  {label:<72} {ms:6.2f} ms{ratio}")


def report(rows: list[tuple[str, float]], minimal: float | None, replays: list[tuple[str, float]],
           docs: Mapping[str, tuple[str, dict[str, Any]]]) -> None:
    print(f"where the Firestore emulator's CPU per event goes ({BURST}-event bursts; {REPLAYS} replays, 2 in flight):")
    show_rows(rows + replays, minimal)
    if len(rows) == 6:
        print(f"  => the sweep, idle: {rows[3][1] - rows[5][1]:.1f} ms of emulator CPU a second, of which its "
              f"aggregates {rows[3][1] - rows[4][1]:.1f}; beside the burst: {rows[0][1] - rows[2][1]:.2f} ms/event")
    for line in shapes(docs):
        print(line)


def replays(stack, state, db, groups, cpu, docs) -> list[tuple[str, float]]:
    """Upsert's calls replayed with the sweep stopped (its queries are time, not calls)."""
    from infra.local.emulators import Process

    Process(**state.functions["sweep"]).stop()
    try:
        return _replays(db, groups, cpu, docs)
    finally:
        stack.restart_functions(state, ["sweep"])


def _replays(db, groups, cpu, docs) -> list[tuple[str, float]]:
    resource, entry = docs["pipeline resource"][1], docs["pipeline ledger entry (= history)"][1]
    small, small_entry = docs["minimal resource (= history entry)"][1], docs["minimal ledger entry"][1]
    t = str(int(time.time()))
    return [
        ("upsert's calls replayed: reads (resource, callbacks' summary)", replay(db, groups, cpu, resource, entry,
                                                                               True, False, f"r{t}")),
        ("  ... writes (ledger entry + resource), the pipeline's documents", replay(db, groups, cpu, resource, entry,
                                                                                  False, True, f"w{t}")),
        ("  ... writes, the minimal handler's documents", replay(db, groups, cpu, small, small_entry, False, True,
                                                                 f"m{t}")),
    ]
