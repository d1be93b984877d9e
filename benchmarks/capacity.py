"""Capacity model: every documented limit of Pub/Sub, Cloud Run and Firestore that stands between this
design and a fleet, with what the design puts against it, for the fleets of docs/scale.md.

The design is read from its declarations, so a change to them changes the model:

- infra/topology.yaml (infra/topology.py): topics and subscriptions per provider and shared ones, the
  report interval (steady re-reports: every resource once per ``freshness.report_every``);
- terraform/data_model.tf (python-hcl2, as tests/deploy reads it): the composite indexes, the fields
  written at the event rate with sequentially increasing values and how each is kept off one index
  range (sharded or unindexed), the TTL fields;
- the code's constants: shards (shared/state/documents.py), the hot-document write rate, the sweep's and
  the feed's batches.

Per-event work is counted, not assumed: Firestore reads and writes, Pub/Sub publishes and function
invocations per applied change and per re-report are ``benchmarks/cost.py``'s counted figures (run it
to refresh them: ``--counted`` takes its numbers), priced with cost.py's list prices. The CPU per event
is ``benchmarks/pipeline.py``'s measured figure, an input (``--cpu-ms``): this model runs nothing.

- terraform/topology.tf's lane_topic_keys (the topics that live in var.lanes_project) and, per fleet, the
  deployment it is sized with (terraform/examples/<name>/main.tf: lanes_project, quota_preferences).

Prints a table per fleet; asserts nothing (run: make bench). Sources checked 2026-11-25 (docs/scale.md).
"""

from __future__ import annotations

import argparse
import math
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from benchmarks.capacity_design import (  # noqa: E402  (the design it models)
    FLEETS,
    INGEST_CPU_MS,
    MESSAGE_BYTES,
    MONTH_SECONDS,
    PUBLISH_BASELINE,
    RESOURCE_FIELDS,
    RUN_CPU_BASELINE,
    RUN_MEMORY_BASELINE_GIB,
    TARGET,
    UPSERT_CPU_MS,
    Design,
    Fleet,
    S,
    aggregates_workers,
    dashboard_with_charts,
    deployment,
    design,
    function_memory_gib,
    snapshot_periods,
    summary_queries,
    summary_reads,
    trend_reads,
)
from benchmarks.capacity_design import MONTH_DAYS, USAGE_PAGE_CALLS, usage_call_reads, usage_chunks  # noqa: E402
from benchmarks.capacity_design import usage_every, usage_keep  # noqa: E402
from shared.api import served  # noqa: E402
from shared.api import usage as usage_api  # noqa: E402
from shared.state import documents, trends  # noqa: E402
from shared.sweep import handler as sweep  # noqa: E402

# ---- what the design puts against each limit ---------------------------------------------------------

def rates(f: Fleet, d: Design) -> dict[str, float]:
    heartbeat = f.resources / d.report_every
    rereports = heartbeat + (f.rereports or 0.0)
    return {"changes": f.changes, "rereports": rereports, "events": f.changes + rereports,
            "heartbeat": heartbeat, "hot": min(f.changes + rereports, f.resources * 0.0001 * documents.HOT_RATE)}


# field => which events write it (shared/upsert/decide.py: a change writes the feed entry and the
# document; a re-report writes the document's last-seen, order fields and deadline; an applied or stale
# update's ledger entry is its history entry, recordedAt: taken at the change rate)
# writtenAt is in an index only with ``hot`` (hot, shard, writtenAt): a hot document's writes (the sweep
# deletes the field once it is quiet), at most HOT_RATE each; the busiest 0.01% of resources taken as hot.
WRITTEN_BY = {("events", documents.COMMITTED_AT): "changes", ("events", "recordedAt"): "changes",
              (documents.TRANSITIONS, "recordedUs"): "changes",  # upsert: one transition per change (issue 40)
              ("resources", "updatedAt"): "changes",
              ("resources", "staleAt"): "events", ("resources", "writtenAt"): "hot"}


@dataclass(frozen=True)
class Row:
    """A limit (None: no fixed one, the note says what the design does there), what the design puts
    against it, in what unit, and where the limit is documented."""

    limit: str
    capacity: float | None
    demand: float
    unit: str
    source: str
    note: str = ""

    @property
    def use(self) -> float:
        return self.demand / self.capacity if self.capacity else 0.0


def busiest_provider(f: Fleet) -> float:
    """The busiest provider's share of the events."""
    return max(f.busiest_provider, 1 / f.providers)


def firestore_rows(f: Fleet, d: Design) -> list[Row]:
    """One row per (sequential field, shard field in front of it): the writes/s one of its index ranges
    takes. Behind a shard field alone (or an equality whose value may be most of the fleet: a type, a
    status, hot) a range takes the field's whole rate over the shards; behind the provider and a shard field
    (every index of that shard field on the field), the busiest provider's share of it."""
    r = rates(f, d)
    rows = []
    for collection, fields in sorted(d.sequential.items()):
        shard_fields = d.shards.get(collection, {})
        for name, how in sorted(fields.items()):
            written = r[WRITTEN_BY.get((collection, name), "events")]
            composites = [c for c in d.composite(collection, name) if len(c) > 1]
            if how == documents.SHARDED:
                for shard in sorted({c[-2] for c in composites if c[-2] in shard_fields}):
                    behind = [c for c in composites if c[-2] == shard]
                    per_provider = all(c[0] == "provider" for c in behind)
                    share = busiest_provider(f) if per_provider else 1.0
                    n = shard_fields[shard]
                    label = (f"{collection}.{name} behind provider, {shard}: writes/s per index range "
                             f"(busiest provider's, x{n})" if per_provider else
                             f"{collection}.{name} behind {shard}: writes/s per index range (sharded x{n})")
                    note = (f"the busiest provider's {share:.0%} of the writes" if per_provider else
                            "indexed behind " + ", ".join(sorted({"+".join(c[:-1]) for c in behind})))
                    rows.append(Row(label, 500, written * share / n, "writes/s", S["shard"], note))
            if any(c[-2] not in shard_fields and c[-2] != "key" for c in composites):
                rows.append(Row(f"{collection}.{name}: writes/s, indexed unsharded!", 500, written, "writes/s",
                                S["shard"]))
    rows.append(Row("events.processedAt behind key: writes/s per resource", 500, f.hottest, "writes/s", S["shard"],
                    "only one resource's entries share a range"))
    rows.append(Row("one document: sustained writes/s (busiest resource)", 1, min(f.hottest, d.hot_rate),
                    "writes/s", S["bestpractices"], f"beyond {d.hot_rate}/s updates coalesce on the ledger"))
    composites = sum(1 for i in d.indexes if i["collection"] == documents.RESOURCES)
    single = 2 * (RESOURCE_FIELDS - len(d.sequential[documents.RESOURCES]))  # ascending and descending each
    rows.append(Row("index entries per resource document", 40_000, composites + single, "entries", S["quotas"],
                    f"{composites} composite + {single} single-field; the fan-out is write latency"))
    writes = r["changes"] * d.change["writes"] + r["rereports"] * d.rereport["writes"]
    ramp = max(0.0, math.log(max(writes, 500) / 500, 1.5) * 5)
    rows.append(Row("database writes/s (no hard cap; 500/50/5 ramp-up rule)", None, writes, "writes/s", S["ramp"],
                    f"{writes:,.0f} writes/s, reached after {ramp:.0f} min of +50%/5 min from 500/s"))
    return rows


def quota(f: Fleet, name: str) -> float | None:
    """A quota the fleet's deployment declares (variable quota_preferences), None: the project's default."""
    return (deployment(f.deployment).get("quota_preferences") or {}).get(name)


def pubsub_rows(f: Fleet, d: Design) -> list[Row]:
    r = rates(f, d)
    in_flight = r["changes"] * 0.2  # a shared fan-out subscription: changes/s x ~200 ms in flight
    declared = quota(f, "pubsub_publisher_kb_per_minute")
    publish_limit = declared * 1000 / 60 if declared else PUBLISH_BASELINE
    return [
        Row("publish throughput per ordering key (one resource)", 1_000_000, f.hottest * MESSAGE_BYTES, "B/s",
            S["pubsub"]),
        Row("publish throughput per region (the functions' project)", publish_limit,
            (r["events"] * 2 + r["changes"] * (1 + f.callbacks)) * MESSAGE_BYTES, "B/s", S["pubsub"],
            "ingress + normalised per event, changed + callbacks per change; charged to the publisher's "
            "credentials' project (the providers' ingress counted here too: conservative); "
            + (f"declared quota_preferences.pubsub_publisher_kb_per_minute = {declared:,.0f}" if declared else
               "the default (200 MB/s, large region)")),
        *project_rows(f, d),
        Row("subscriptions per topic", 10_000, d.max_subs_per_topic, "subscriptions", S["pubsub"]),
        Row("push: outstanding messages per subscription (dcm-status-changed)", 3_000, in_flight, "messages",
            S["push"], "changes/s x 200 ms in flight; push adapts its rate to the acks (docs/scale.md)"),
    ]


def project_rows(f: Fleet, d: Design) -> list[Row]:
    """Topics and subscriptions, each project against its own 10,000: with the deployment's lanes project
    (variable lanes_project) the lanes count there, the rest in the main project."""
    topics = d.topics_per_provider * f.providers + d.shared_topics
    subs = d.subs_per_provider * f.providers + d.shared_subs
    if not deployment(f.deployment).get("lanes_project"):
        return [Row("topics per project", 10_000, topics, "topics", S["pubsub"],
                    f"{d.topics_per_provider} per provider + {d.shared_topics}; no lanes project"),
                Row("subscriptions per project", 10_000, subs, "subscriptions", S["pubsub"],
                    f"{d.subs_per_provider} per provider + {d.shared_subs}; no lanes project")]
    lane_topics, lane_subs = d.lane_topics_per_provider * f.providers, d.lane_subs_per_provider * f.providers
    return [
        Row("topics per project (main)", 10_000, topics - lane_topics, "topics", S["pubsub"],
            f"{d.topics_per_provider - d.lane_topics_per_provider} per provider (ingress) + {d.shared_topics}"),
        Row("subscriptions per project (main)", 10_000, subs - lane_subs, "subscriptions", S["pubsub"],
            f"{d.subs_per_provider - d.lane_subs_per_provider} per provider + {d.shared_subs}"),
        Row("topics per project (lanes_project)", 10_000, lane_topics, "topics", S["pubsub"],
            f"{d.lane_topics_per_provider} per provider (its lane)"),
        Row("subscriptions per project (lanes_project)", 10_000, lane_subs, "subscriptions", S["pubsub"],
            f"{d.lane_subs_per_provider} per provider (upsert's)"),
    ]


def run_rows(f: Fleet, d: Design) -> list[Row]:
    """Instances are bounded by the region's CPU quota (1 vCPU each: vCPU = instances), scaled out at 60%
    CPU, and by its memory quota (instances x the declared memory); a service's maximum instances is the
    lower of the two quotas over its size (the max-instances page). The fan-out consumers of the changed
    topic (audit, notify; billing is none since issue 40) are taken at ingest's CPU per change each. The quota: the deployment's declared
    quota_preferences.run_cpu, else a 1,000 vCPU baseline; memory: a 2,000 GiB baseline."""
    regional_vcpu = quota(f, "run_cpu") or RUN_CPU_BASELINE
    memory = function_memory_gib()
    r = rates(f, d)
    upsert = r["events"] * d.upsert_cpu_ms / 1000 / 0.6
    every = upsert + (r["events"] + r["changes"] * 2) * d.ingest_cpu_ms / 1000 / 0.6
    return [
        Row("vCPU of every function, against the regional CPU quota", regional_vcpu, every, "vCPU", S["maxinst"],
            f"upsert {upsert:,.0f} of them ({d.upsert_cpu_ms} ms/event); the quota: "
            + (f"declared quota_preferences.run_cpu = {regional_vcpu:,.0f}" if quota(f, "run_cpu") else
               "a baseline, raised on request")),
        Row("memory of every function, against the regional memory quota", RUN_MEMORY_BASELINE_GIB, every * memory,
            "GiB", S["maxinst"], f"{memory:g} GiB an instance (terraform/variables.tf function_defaults); the quota: "
            "a baseline, raised on request"),
        Row("concurrent requests per instance (declared)", 1000, d.sizing["max_instance_request_concurrency"],
            "requests", S["concurrency"], "terraform/variables.tf function_defaults"),
    ]


def read_rows(f: Fleet, d: Design) -> list[Row]:
    summary, stats = summary_reads(f), stats_reads(f, d)
    every = snapshot_periods()
    platform = summary / every["summary"] + stats / every["stats"]  # reads/s, however many readers
    dashboard = 1 / every["summary"] + 1 / every["stats"]  # one read of each snapshot per period
    return [
        Row("sweep: the summary snapshot, reads per tick (count queries)", None, summary, "reads", S["count"],
            f"{summary_queries(f):,} counts: total, per type and status, per provider; every {every['summary']} s"),
        Row("sweep: the stats snapshot, reads per computation (counts over the ledger's retention)", None, stats,
            "reads", S["count"], f"the ledger holds {ledger_entries(f, d):,.0f} entries ({d.ledger_days} days); "
            f"every {every['stats'] // 60} min"),
        Row("the aggregates' snapshots: $ per month (whoever reads them)", None,
            platform * MONTH_SECONDS * cost_prices()["read"], "USD", S["count"],
            f"{platform:,.1f} reads/s; shared/state/snapshots.py, DCM_SUMMARY/STATS_EVERY_SECONDS"),
        Row("GET /v1/summary, GET /v1/stats: reads per call", None, 1, "reads", S["pricing"],
            f"the snapshot's document; none while the api instance keeps it ({served.KEEP_SECONDS:.0f} s)"),
        Row("an open dashboard: $ per month (each snapshot read once per period)", None,
            dashboard * MONTH_SECONDS * cost_prices()["read"], "USD", S["pricing"],
            f"{dashboard * 3600:,.0f} reads/h; shared/api/static/app.js snapshotDelay"),
        Row("sweep: the trends, reads per tick (4 totals a window, + per provider the kinds that moved; 2 a tick)",
            None, trend_reads(f), "reads", S["count"], f"shared/state/trends.py: 2 windows' 4 totals, applied "
            f"per provider (all moving), {trends.CATCH_UP + 1} stored minutes; idle: {trend_reads(f, 0)}, any fleet"),
        Row("sweep: the trends, $ per month (their reads and 2 writes a minute; no TTL, kept as history)", None,
            (trend_reads(f) / 60 * cost_prices()["read"] + 2 / 60 * cost_prices()["write"]) * MONTH_SECONDS, "USD",
            S["count"], f"{trend_reads(f) / 60:,.1f} reads/s, 2 writes a minute (docs/cost.md \"Usage and trends\")"),
        Row("an open dashboard with the charts: $ per month (+ the Pipeline chart's minute a snapshot)", None,
            dashboard_with_charts(every) * MONTH_SECONDS * cost_prices()["read"], "USD", S["pricing"],
            f"{dashboard_with_charts(every) * 3600:,.0f} reads/h "
            f"(${dashboard_with_charts(every) * MONTH_SECONDS * cost_prices()['read']:.3f}), "
            f"{dashboard_with_charts(every) / dashboard:.2f} x without ({dashboard * 3600:,.0f} reads/h, "
            f"${dashboard * MONTH_SECONDS * cost_prices()['read']:.3f}); opening it reads {6 * 60} minutes once; "
            "shared/api/static/charts.js onSnapshot"),
        *usage_rows(f),
        Row("change-feed followers: $ per month (each reads every change)", None,
            f.readers * (f.changes + 1) * MONTH_SECONDS * cost_prices()["read"], "USD", S["pricing"],
            f"{f.readers} followers, {f.readers * (f.changes + 1):,.0f} reads/s; many: subscribe to "
            "dcm-status-changed instead"),
        Row("GET /v1/resources?sort=-updatedAt: reads per page of 50", None, 2 * 51, "reads", S["in"],
            "two shard groups read 51 each: independent of the fleet's size"),
        sweep_tick_row(f, d),
    ]


def usage_rows(f: Fleet) -> list[Row]:  # /v1/usage from the daily snapshot, against the computation before it
    price, keep, call = cost_prices(), usage_keep(f), usage_call_reads(f)
    keep_usd = keep["reads"] * price["read"] + keep["writes"] * price["write"]
    return [
        Row("GET /v1/usage before the snapshot: reads per computation (every transition, after a month)", None,
            f.changes * MONTH_SECONDS, "reads", S["pricing"], f"${f.changes * MONTH_SECONDS * price['read']:,.2f}"),
        Row("GET /v1/usage: reads per computation of a month's window (the daily snapshot)", None, call, "reads",
            S["pricing"], f"${call * price['read']:,.4f}: {MONTH_DAYS} days x {usage_chunks(f):,} chunks + what was "
            f"recorded since billing kept it ({usage_every()} s); kept by the api {usage_api.KEEP_SECONDS / 60:.0f} min"),
        Row("an open Usage page: $ per month (a month's window, asked hourly)", None, USAGE_PAGE_CALLS * call *
            price["read"], "USD", S["pricing"], f"{USAGE_PAGE_CALLS} computations; before the snapshot "
            f"${USAGE_PAGE_CALLS * f.changes * MONTH_SECONDS * price['read']:,.0f}"),
        Row("billing: keeping the usage snapshot, $ per month", None, keep_usd, "USD", S["pricing"],
            f"each transition read once ({keep['reads']:,.0f} reads, {keep['writes']:,.0f} chunk writes): "
            f"${keep_usd / (f.changes * MONTH_SECONDS) * 1e6:,.2f} per million changes, off the event path"),
    ]


def sweep_tick_row(f: Fleet, d: Design) -> Row:
    """How long a sweep tick takes (its queries at 20 ms each, so many at once), against its minute."""
    sweep_queries = f.providers / sweep.SILENCE_WORKERS  # a tick's provider queries, that many at once
    stale_groups = math.ceil(d.shards[documents.RESOURCES][documents.STALE_SHARD] / documents.MAX_IN)
    return Row("sweep tick duration (providers', freshness and summary queries at 20 ms), within its period", 60,
               (sweep_queries + stale_groups + summary_queries(f) / aggregates_workers()) * 0.020 + 2, "s",
               "infra/topology.yaml (sweep: schedule every minute)",
               f"{f.providers:,} queries, {sweep.SILENCE_WORKERS} at once, + {stale_groups} freshness queries "
               f"(staleShard in groups of {documents.MAX_IN}) reading <= {sweep.FRESHNESS_BATCH} stale, "
               f"+ {summary_queries(f):,} counts, {aggregates_workers()} at once")


def ledger_entries(f: Fleet, d: Design) -> float:
    """Ledger entries held: the steady rate over the retention, and a burst's re-reports once."""
    r = rates(f, d)
    return (f.changes + r["heartbeat"]) * d.ledger_days * 86_400 + (f.rereports or 0) * (f.burst_seconds or 0)


def stats_reads(f: Fleet, d: Design) -> int:
    """shared/state/aggregates.py stats: the ledger by outcome (every entry, once), duplicates, resources, dead
    letters (small)."""
    return math.ceil(ledger_entries(f, d) / 1000) + math.ceil(f.resources / 1000) + 3


def cost_prices() -> dict[str, float]:
    from benchmarks import cost

    return {"read": cost.FIRESTORE_READ, "write": cost.FIRESTORE_WRITE}


ROWS: tuple[Callable[[Fleet, Design], list[Row]], ...] = (firestore_rows, pubsub_rows, run_rows, read_rows)


def monthly_usd(f: Fleet, d: Design) -> float:
    from benchmarks import cost  # its list prices

    r = rates(f, d)
    steady = r["changes"] + r["heartbeat"]  # a burst is not a month

    def per(counted: dict[str, float]) -> float:
        return (counted["reads"] * cost.FIRESTORE_READ + counted["writes"] * cost.FIRESTORE_WRITE
                + counted["publishes"] * 2 * max(1000, MESSAGE_BYTES) / cost.TIB * cost.PUBSUB_PER_TIB
                + counted["invocations"] * cost.FUNCTION_INVOCATION
                + (d.ingest_cpu_ms + d.upsert_cpu_ms) / 1000 * (cost.VCPU_SECOND + cost.MEMORY_GIB * cost.GIB_SECOND))
    usd = (f.changes * per(d.change) + r["heartbeat"] * per(d.rereport)) * MONTH_SECONDS
    return usd if steady else 0.0


def title(f: Fleet, d: Design) -> str:
    r = rates(f, d)
    return (f"{f.name}: {f.providers:,} providers, {f.resources:,} resources, {f.changes:,.0f} changes/s, "
            f"{r['rereports']:,.0f} re-reports/s ({r['heartbeat']:,.0f} of them heartbeats)")


def verdict(f: Fleet, d: Design, rows: list[Row]) -> list[str]:
    over = sorted((row for row in rows if row.use > TARGET), key=lambda row: -row.use)
    highest = max(rows, key=lambda row: row.use)
    first = (f"first limit to break: {over[0].limit} ({over[0].use:.0%})" if over else
             f"first limit to break: none above {TARGET:.0%} (highest: {highest.limit}, {highest.use:.0%})")
    return [first, *degradation(f, d, over), sizing(f, d, bool(over)), requests(f, rows),
            f"monthly cost at the steady rate (changes + heartbeats): ${monthly_usd(f, d):,.0f}"]


QUOTAS = {"vCPU of every function": ("run_cpu", 1.0), "publish throughput per region": (
    "pubsub_publisher_kb_per_minute", 60 / 1000)}  # row => variable quota_preferences.<name>, unit per row unit


def requests(f: Fleet, rows: list[Row]) -> str:
    """The quotas this fleet needs at the target use (terraform: quota_preferences), against what its
    deployment declares."""
    asks = []
    for row in rows:
        for prefix, (name, unit) in QUOTAS.items():
            if row.limit.startswith(prefix):
                need = math.ceil(row.demand / TARGET * unit)
                have = quota(f, name)
                default = row.capacity * unit if not have else None
                asks.append(f"{name} >= {need:,}" + (f" (declared {have:,.0f})" if have else
                                                     " (the default holds it)" if need <= default else " (REQUEST IT)"))
    return "quota to request (terraform quota_preferences): " + ", ".join(asks)


def sizing(f: Fleet, d: Design, admitted: bool) -> str:
    """What terraform.tfvars must say for this fleet: upsert's max instances (its CPU at 60%, with 30%
    headroom), or, for a burst beyond the ranges, exactly the admission (degradation())."""
    per_event = d.upsert_cpu_ms / 1000 / 0.6
    declared = int(d.sizing["max_instance_count"])
    if admitted and f.burst_seconds:
        admit = math.ceil(admitted_events(d) * per_event)
        return (f"Terraform sizing: function_overrides.upsert.max_instance_count = {admit:,}: the admission "
                f"(declared default {declared})")
    needed = math.ceil(rates(f, d)["events"] * per_event)
    wanted = math.ceil(needed / TARGET)
    return (f"Terraform sizing: upsert needs {needed:,} instances; " +
            (f"set function_overrides.upsert.max_instance_count >= {wanted:,} (declared default {declared})"
             if wanted > declared else f"the declared default max_instance_count {declared} holds it"))


def cell(row: Row) -> tuple[str, str, str]:
    if row.capacity is None:
        return "-", f"{row.demand:,.0f} {row.unit}", "-"
    flag = " !" if row.use > TARGET else ""
    return f"{row.capacity:,.0f} {row.unit}", f"{row.demand:,.1f}", f"{row.use:.0%}{flag}"


def report(f: Fleet, d: Design) -> list[str]:
    rows = [row for rows_of in ROWS for row in rows_of(f, d)]
    lines = [f"== {title(f, d)}", f"{'limit':<66}{'limit':>22}{'design':>16}{'use':>7}  source / note"]
    for row in rows:
        capacity, demand, use = cell(row)
        lines.append(f"{row.limit:<66}{capacity:>22}{demand:>16}{use:>7}  {row.source} {row.note}")
    return lines + verdict(f, d, rows)


def markdown(f: Fleet, d: Design) -> list[str]:
    """The same figures as a Markdown table (docs/scale.md)."""
    rows = [row for rows_of in ROWS for row in rows_of(f, d)]
    lines = [f"### {title(f, d)}", "", "| limit | value | this design | use | source, note |", "|---|---|---|---|---|"]
    for row in rows:
        capacity, demand, use = cell(row)
        lines.append(f"| {row.limit} | {capacity} | {demand} | {use} | [source]({row.source}) {row.note} |")
    return lines + [""] + [f"- {line}" for line in verdict(f, d, rows)] + [""]


def degradation(f: Fleet, d: Design, over: list[Row]) -> list[str]:
    """A burst beyond a range's 70%: upsert admits what the ranges take (its max instances), Pub/Sub keeps
    the rest (7 days), drained once the burst ends."""
    if not f.burst_seconds or not over:
        return []
    r = rates(f, d)
    admitted = admitted_events(d)
    backlog = max(0.0, (r["events"] - admitted) * f.burst_seconds)
    spare = admitted - (f.changes + r["heartbeat"])
    drain = (f"drains in {backlog / spare / 60:,.0f} min after the burst" if spare > 0 else
             "drains once the change rate falls below the admitted rate")
    return [f"degrades: upsert admits {admitted:,.0f} events/s (its max instances), a backlog of {backlog:,.0f} "
            f"events waits in Pub/Sub (7 days retained) and {drain}; changes queue behind the re-reports of "
            "their provider's lane meanwhile (later, never lost)"]


def admitted_events(d: Design) -> float:
    """Events/s every event's sequential field (staleAt) takes at 70% of each of its index ranges."""
    return d.shards[documents.RESOURCES][documents.STALE_SHARD] * 500 * TARGET


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ingest-cpu-ms", type=float, default=INGEST_CPU_MS,
                        help="ingest's CPU ms per event (benchmarks/pipeline.py measures it)")
    parser.add_argument("--upsert-cpu-ms", type=float, default=UPSERT_CPU_MS,
                        help="upsert's CPU ms per event (benchmarks/pipeline.py measures it)")
    parser.add_argument("--counted", help="reads,writes,publishes,invocations per applied change "
                                          "(benchmarks/cost.py counts them)")
    parser.add_argument("--markdown", action="store_true", help="Markdown tables (docs/scale.md)")
    args = parser.parse_args(argv)
    counted = tuple(float(x) for x in args.counted.split(",")) if args.counted else None
    d = design((args.ingest_cpu_ms, args.upsert_cpu_ms), counted)
    print(f"design: shards {d.shards}, {d.topics_per_provider} topics and {d.subs_per_provider} subscriptions "
          f"per provider, a heartbeat every {d.report_every} s, CPU ms per event ingest {d.ingest_cpu_ms}, "
          f"upsert {d.upsert_cpu_ms}; target use <= {TARGET:.0%}")
    for f in FLEETS:
        print("\n".join(markdown(f, d) if args.markdown else report(f, d)) + "\n")


if __name__ == "__main__":
    main()
