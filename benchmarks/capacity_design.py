"""The capacity model's design, read from its declarations (benchmarks/capacity.py puts it against the limits):
the topics and subscriptions (infra/topology.yaml), the composite indexes, sequential fields and TTLs
(terraform/data_model.tf), the functions' sizing (terraform/variables.tf), the lanes' topics
(terraform/topology.tf), a fleet's deployment (terraform/examples/<name>/main.tf); the counted and measured
figures per event; the fleets of docs/scale.md."""

from __future__ import annotations

import copy
import functools
import math
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hcl2

from infra.topology import load as load_topology
from infra.topology import seconds
from shared.runtime import settings
from shared.state import documents, trends

REPO = Path(__file__).resolve().parent.parent
DATA_MODEL = REPO / "terraform" / "data_model.tf"
VARIABLES = REPO / "terraform" / "variables.tf"
TOPOLOGY_TF = REPO / "terraform" / "topology.tf"
EXAMPLES = REPO / "terraform" / "examples"
RUN_CPU_BASELINE = 1000  # vCPU: the regional quota the model assumes when the deployment asks for none
RUN_MEMORY_BASELINE_GIB = 2000  # GiB: the regional memory quota beside it (the max-instances page's example)
PUBLISH_BASELINE = 200_000_000  # B/s: Pub/Sub's publisher throughput per large region, by default
HCL = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)
TARGET = 0.70  # a limit used beyond this is "over" (headroom for bursts and the ramp-up)
MONTH_SECONDS = 30 * 24 * 3600

# benchmarks/cost.py's counted figures per event (2026-11-25 run, on this branch; a publish counts the
# provider's own): reads, writes, publishes, invocations. Refresh with --counted R,W,P,I for a change.
# 2026-11-27 (issue 32): an applied change 3 -> 1 read, 5.5 -> 3.5 writes, 4.5 -> 3.5 invocations (the ledger read
# only when it may matter, history on the ledger entry, billing one write, notify not invoked without a callback
# that can match); a re-report 2 -> 1 read, 2 -> 1 write (its resource document only).
# 2026-11-28 (issue 40): an applied change 3.5 -> 2.5 invocations (upsert writes the transition in its commit:
# billing is no consumer of the changed topic; the writes stay 3.5, the delivery to billing goes).
COUNTED_CHANGE = {"reads": 1.0, "writes": 3.5, "publishes": 3.0, "invocations": 2.5}
COUNTED_REREPORT = {"reads": 1.0, "writes": 1.0, "publishes": 2.0, "invocations": 2.0}
MESSAGE_BYTES = 1_500  # a normalised status update or a change event, attributes included (cost.py bills >= 1 KB)
RESOURCE_FIELDS = 33  # top-level fields of a resource document (shared/upsert/decide.py resource_document and the rest)
# benchmarks/pipeline.py's CPU ms per event from /proc (2026-11-25, 600 events on the emulators): ingest 3.4,
# upsert 5.8 (the emulators' own CPU not counted). Inputs: --ingest-cpu-ms, --upsert-cpu-ms.
INGEST_CPU_MS, UPSERT_CPU_MS = 3.4, 5.8

S = {  # the sources, as cited in docs/scale.md
    "shard": "https://cloud.google.com/firestore/native/docs/solutions/shard-timestamp",
    "bestpractices": "https://cloud.google.com/firestore/docs/best-practices",
    "quotas": "https://cloud.google.com/firestore/quotas",
    "ramp": "https://cloud.google.com/firestore/docs/best-practices#ramping_up_traffic",
    "pubsub": "https://cloud.google.com/pubsub/quotas",
    "push": "https://cloud.google.com/pubsub/docs/push",
    "concurrency": "https://cloud.google.com/run/docs/about-concurrency",
    "maxinst": "https://cloud.google.com/run/docs/configuring/max-instances-limits",
    "count": "https://cloud.google.com/firestore/docs/query-data/aggregation-queries",
    "pricing": "https://cloud.google.com/firestore/pricing",
    "in": "https://cloud.google.com/firestore/docs/query-data/queries#in_not-in_and_array-contains-any",
}


def parsed(path: Path) -> dict[str, Any]:
    """A Terraform file as python-hcl2 reads it (a copy: the caller's to change). Parsed once per content:
    a design reads four files, at about a tenth of a second of CPU each, and a run builds many designs."""
    return copy.deepcopy(_parse(path.read_text()))


@functools.lru_cache(maxsize=16)
def _parse(text: str) -> dict[str, Any]:
    return hcl2.loads(text, serialization_options=HCL)


@dataclass(frozen=True)
class Fleet:
    name: str
    providers: int
    resources: int
    changes: float  # applied changes/s (peak)
    rereports: float | None = None  # re-reports/s beyond the steady heartbeat; None: the heartbeat only
    callbacks: float = 0.1  # webhook deliveries per change
    readers: int = 10  # change-feed followers, each reading every change (and an empty poll a second)
    hottest: float = 0.5  # events/s of the busiest resource
    burst_seconds: float | None = None  # a re-report burst that lasts this long (a storm, a resync)
    busiest_provider: float = 0.1  # the busiest provider's share of the events (at least 1 / providers)
    deployment: str | None = None  # terraform/examples/<deployment>/main.tf: the variables it is deployed with


FLEETS = (
    Fleet("DCM lab", 10, 10_000, 10),
    Fleet("region", 200, 1_000_000, 500, readers=100),
    Fleet("hyperscale", 5_000, 10_000_000, 10_000, readers=100, deployment="hyperscale"),
    Fleet("hyperscale resync", 5_000, 10_000_000, 10_000, rereports=100_000, readers=100,
          burst_seconds=100, deployment="hyperscale"),
    Fleet("storm (region re-reported in 10 min)", 200, 1_000_000, 500, rereports=1_000_000 / 600,
          readers=100, burst_seconds=600),
)


@dataclass(frozen=True)
class Design:
    """What the declarations say."""

    topics_per_provider: int
    shared_topics: int
    subs_per_provider: int
    shared_subs: int
    lane_topics_per_provider: int  # of them, the lanes' (terraform/topology.tf lane_topic_keys): var.lanes_project
    lane_subs_per_provider: int
    max_subs_per_topic: int
    report_every: int
    sequential: dict[str, dict[str, str]]
    indexes: list[dict[str, Any]]
    ttl: dict[str, str]
    shards: dict[str, dict[str, int]] = field(default_factory=dict)  # collection => shard field => shards
    hot_rate: float = documents.HOT_RATE
    sizing: dict[str, float] = field(default_factory=lambda: function_defaults())
    ledger_days: int = 7  # DCM_LEDGER_TTL_DAYS (Terraform ledger_ttl_days): the feed's and the stats' window
    ingest_cpu_ms: float = INGEST_CPU_MS
    upsert_cpu_ms: float = UPSERT_CPU_MS
    change: dict[str, float] = field(default_factory=lambda: dict(COUNTED_CHANGE))
    rereport: dict[str, float] = field(default_factory=lambda: dict(COUNTED_REREPORT))

    def composite(self, collection: str, order_by: str) -> list[tuple[str, ...]]:
        return [tuple(f["field_path"] for f in i["fields"]) for i in self.indexes
                if i["collection"] == collection and i["fields"][-1]["field_path"] == order_by]


def data_model(path: Path = DATA_MODEL) -> dict[str, Any]:
    """The data model's locals, with ``local.x`` references resolved and the indexes expanded as
    data_model.tf expands them."""
    doc = parsed(path)
    local: dict[str, Any] = {}
    for block in doc["locals"]:
        local.update(block)
    specs = [{**s, "equality": _resolve(s["equality"], local)} for s in local["firestore_index_specs"]]
    return {"sequential": local["firestore_sequential_fields"], "ttl": local["firestore_ttl_fields"],
            "shard": local["firestore_shard_field"], "indexes": _expand(specs, local["firestore_shard_field"]),
            "shard_fields": {c: _resolve(fields, local) for c, fields in local["firestore_shard_fields"].items()}}


def _resolve(value: Any, local: dict[str, Any]) -> Any:
    if isinstance(value, list):
        return [_resolve(v, local) for v in value]
    if isinstance(value, str) and value.startswith("${local."):
        return _resolve(local[value[len("${local."):-1]], local)
    return value


def lane_topic_keys(path: Path = TOPOLOGY_TF) -> list[str]:
    """The topic keys whose topics (and subscriptions) live in var.lanes_project (terraform/topology.tf)."""
    doc = parsed(path)
    return next(block["lane_topic_keys"] for block in doc["locals"] if "lane_topic_keys" in block)


def deployment(name: str | None) -> dict[str, Any]:
    """The module inputs of terraform/examples/<name>/main.tf (what that deployment declares), {} for none."""
    if not name:
        return {}
    doc = parsed(EXAMPLES / name / "main.tf")
    [module] = [args for block in doc["module"] for args in block.values()]
    return module


def _expand(specs: list[dict[str, Any]], shard: str) -> list[dict[str, Any]]:
    out = []
    for spec in specs:
        for eq in spec["equality"]:
            for order in spec["orders"]:
                middle = [{"field_path": shard, "order": "ASCENDING"}] if spec.get("sharded") else []
                fields = [{"field_path": eq, "order": "ASCENDING"}, *middle,
                          {"field_path": spec["order_by"], "order": order}]
                out.append({"collection": spec["collection"], "fields": fields})
    return out


def function_defaults(path: Path = VARIABLES) -> dict[str, float]:
    """The declared per-function sizing defaults (variable function_defaults: optional(type, default))."""
    doc = parsed(path)
    [var] = [v["function_defaults"] for v in doc["variable"] if "function_defaults" in v]
    return {name: float(value) for name, value in re.findall(r"(\w+) = optional\(number, ([0-9.]+)\)", var["type"])}


def function_memory_gib(path: Path = VARIABLES) -> float:
    """The declared memory of one function instance (function_defaults.available_memory, "512Mi"), in GiB."""
    [(amount, unit)] = re.findall(r'available_memory\s*=\s*optional\(string, "([0-9.]+)(Mi|Gi)"\)', path.read_text())
    return float(amount) / (1024 if unit == "Mi" else 1)


def sequential_indexed_fields(dm: dict[str, Any]) -> dict[str, dict[str, str]]:
    """collection => {field: sharded|unindexed}: what the data model declares (the test keeps it equal
    to shared/state/documents.py's SEQUENTIAL_FIELDS)."""
    return {c: dict(fields) for c, fields in dm["sequential"].items()}


def design(cpu_ms: tuple[float, float] = (INGEST_CPU_MS, UPSERT_CPU_MS),
           counted: tuple[float, ...] | None = None) -> Design:
    topo = load_topology(providers=["p1", "p2"])
    per_topic: dict[str, int] = {}
    for sub in topo.subscriptions:
        per_topic[sub.topic] = per_topic.get(sub.topic, 0) + 1
    dm = data_model()
    lanes = lane_topic_keys()
    d = Design(topics_per_provider=sum(1 for t in topo.topics if t.provider == "p1"),
               shared_topics=sum(1 for t in topo.topics if t.provider is None),
               subs_per_provider=sum(1 for s in topo.subscriptions if s.provider == "p1"),
               shared_subs=sum(1 for s in topo.subscriptions if s.provider is None),
               lane_topics_per_provider=sum(1 for t in topo.topics if t.provider == "p1" and t.key in lanes),
               lane_subs_per_provider=sum(1 for s in topo.subscriptions if s.provider == "p1" and s.topic_key in lanes),
               shards={c: {f: documents.SHARD_FIELDS[c][f] for f in fields} for c, fields in dm["shard_fields"].items()},
               max_subs_per_topic=max(per_topic.values()),
               report_every=seconds(topo.freshness["report_every"]),
               sequential=sequential_indexed_fields(dm), indexes=dm["indexes"], ttl=dm["ttl"],
               ingest_cpu_ms=cpu_ms[0], upsert_cpu_ms=cpu_ms[1])
    if counted:
        d.change.update(zip(("reads", "writes", "publishes", "invocations"), counted))
    return d


# ---- the reads the code's constants imply -------------------------------------------------------------
def trend_reads(f: Fleet, moving: int = 1) -> int:
    """A tick's trend reads (shared/state/trends.py record): two windows (the minute completed, the current one),
    each its 4 totals over every provider (one read each up to 1,000 entries: a minute's) and one count per
    provider for each of the ``moving`` kinds whose total moved since the minute's stored counts (a fleet whose
    providers all change something each minute: applied; 0: an idle tick), and the stored minutes it looks at."""
    return 2 * len(trends.Count) + 2 * moving * f.providers + trends.CATCH_UP + 1


def dashboard_with_charts(every: dict[str, int]) -> float:
    """Reads/s of an open dashboard with the Pipeline chart: each snapshot once per period, and at each summary
    snapshot the current minute's trend document (it holds the minute before's final counts)."""
    return 1 / every["summary"] + 1 / every["stats"] + 1 / every["summary"]


def snapshot_periods() -> dict[str, int]:
    """How often the sweep writes each snapshot: the settings' production defaults (shared/runtime/settings.py)."""
    s = settings.from_env({"DCM_PROJECT": "capacity"})
    return {"summary": s.summary_every_seconds, "stats": s.stats_every_seconds}


def aggregates_workers() -> int:
    from shared.state import aggregates

    return aggregates.COUNT_WORKERS


def summary_queries(f: Fleet) -> int:
    from shared.state import aggregates

    combos = sum(len(aggregates.statuses(t)) for t in aggregates.registry().resource_types)
    return 1 + combos + f.providers


def summary_reads(f: Fleet) -> int:
    """Each count reads 1 per 1,000 entries (at least 1): the total, the per type and status counts and
    the per provider counts each add up to every resource."""
    return 3 * math.ceil(f.resources / 1000) + summary_queries(f)


# ---- the daily usage snapshot (shared/state/usage/snapshot.py; docs/cost.md "Usage and trends") ----------------
USAGE_PAGE_CALLS = 30 * 24  # an open Usage page asks once an hour (shared/api/static/charts.js USAGE_REFRESH_MS)
MONTH_DAYS = 31


def usage_every() -> int:
    """How often billing keeps the snapshot: the production default (DCM_USAGE_EVERY_SECONDS)."""
    return settings.from_env({"DCM_PROJECT": "capacity"}).usage_every_seconds


def usage_chunks(f: Fleet) -> int:
    from shared.state.usage import snapshot

    return snapshot.chunks_for(f.resources)


def usage_call_reads(f: Fleet) -> float:
    """One computation of a month's window: its days' chunks, the snapshot's state, and what was recorded since
    billing last kept it (on average half its period of changes, each transition read once)."""
    return MONTH_DAYS * usage_chunks(f) + 1 + max(1.0, f.changes * usage_every() / 2)


def usage_keep(f: Fleet) -> dict[str, float]:
    """Billing's keeping (on the sweep's ticks), per month: every transition read once, and at each keep today's chunks read and the
    changed ones written (at most every chunk), plus each new day's chunks written once."""
    keeps = MONTH_SECONDS / usage_every()
    chunks = usage_chunks(f)
    changed = min(chunks, f.changes * usage_every())
    return {"reads": f.changes * MONTH_SECONDS + keeps * (chunks + 1),
            "writes": keeps * (changed + 1) + 30 * chunks}
