"""A search's ``withCounts`` on the Firestore emulator, the old counting against the one pass (issue 42), in one run:
the bench's id search (``q=vm-04``, 1,000 of 10,000 resources), the page with its total and counts read as the api
reads them with ``DCM_SEARCH_COUNT_ROWS`` 0 (production's: a total and one count per status) and 10,000 (the local
stack's: the rows' statuses in one pass), interleaved with the direct page read: wall p50/p99 and the emulator's CPU
per answer (its process group's, from /proc). The answers are checked equal first. Prints figures; asserts nothing
(run: .venv/bin/python benchmarks/search_counts.py; BENCH_SAMPLES, 30)."""

from __future__ import annotations

import glob
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
os.environ.setdefault("DCM_PROJECT", "dcm-bench-search")

from google.cloud import firestore  # noqa: E402

from benchmarks.api import PROVIDERS, STATUSES, pct, seed  # noqa: E402
from infra.local import emulators  # noqa: E402
from shared.api import queries  # noqa: E402
from shared.api.queries import ResourceFilter, resource_page  # noqa: E402
from shared.state.documents import RESOURCES  # noqa: E402

SAMPLES = int(os.environ.get("BENCH_SAMPLES", "30"))
WHERE = ResourceFilter(search="vm-04")


def group_cpu_ms(pgid: int) -> float:
    """CPU time (user + system) of every process in the group: the emulator's launcher and its JVM."""
    ticks = 0
    for path in glob.glob("/proc/[0-9]*/stat"):
        try:
            fields = Path(path).read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            ticks += int(fields[11]) + int(fields[12])
    return ticks * 1000 / os.sysconf("SC_CLK_TCK")


def fleet(db: firestore.Client, n: int = 10_000) -> None:
    """n resources shaped as upsert stores them (one through its store, copied in batches)."""
    seed(db, 1)
    template = next(db.collection(RESOURCES).stream()).to_dict()
    batch = db.batch()
    for i in range(n):
        provider, rid = PROVIDERS[i % len(PROVIDERS)], f"vm-{i:05d}"
        batch.set(db.collection(RESOURCES).document(f"{provider}~vm~{rid}"),
                  {**template, "provider": provider, "resourceId": rid, "status": STATUSES[i % len(STATUSES)],
                   "key": f"{provider}/vm/{rid}"})
        if i % 400 == 399:
            batch.commit()
            batch = db.batch()
    batch.commit()


def with_counts(db: firestore.Client, one_pass_rows: int) -> tuple[int, dict[str, int] | None]:
    counting = queries.list_counts_later(db, WHERE, True, set(STATUSES), one_pass_rows)
    resource_page(db, WHERE, limit=50)
    return counting.result()


def main() -> None:
    proc = emulators.start("firestore", Path(tempfile.mkdtemp()))
    os.environ["FIRESTORE_EMULATOR_HOST"] = proc.host
    try:
        db = firestore.Client(project=os.environ["DCM_PROJECT"])
        fleet(db)
        ways = {"direct page": lambda: resource_page(db, WHERE, limit=50),
                "withCounts, a count per status (before)": lambda: with_counts(db, 0),
                "withCounts, one pass (local stack)": lambda: with_counts(db, 10_000)}
        assert with_counts(db, 0) == with_counts(db, 10_000)
        got: dict[str, tuple[list[float], list[float]]] = {name: ([], []) for name in ways}
        for _ in range(SAMPLES):
            for name, way in ways.items():
                cpu, t = group_cpu_ms(proc.pid), time.perf_counter()
                way()
                got[name][0].append((time.perf_counter() - t) * 1000)
                got[name][1].append(group_cpu_ms(proc.pid) - cpu)
        direct_ms, direct_cpu = got["direct page"]
        print(f"search counts: q=vm-04 (1,000 of 10,000), {SAMPLES} samples each, interleaved, "
              f"load {' '.join(Path('/proc/loadavg').read_text().split()[:3])}")
        for name, (ms, cpu) in got.items():
            print(f"  {name:<40} p50 {statistics.median(ms):6.0f} ms, p99 {pct(ms, 0.99):6.0f} ms "
                  f"({pct(ms, 0.99) / pct(direct_ms, 0.99):.1f}x the direct p99); emulator CPU p50 "
                  f"{statistics.median(cpu):5.0f} ms ({statistics.median(cpu) / statistics.median(direct_cpu):.1f}x)")
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
