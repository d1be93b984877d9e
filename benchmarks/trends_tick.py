"""What one window of the trends costs the Firestore emulator (issue 42), on a fresh emulator of its own:

the ledger holds ``BENCH_TRENDS_ENTRIES`` history entries (one provider's, every shard) and the topology's 10
providers are counted. A window's counts as before issue 42 (every count per provider: 40 aggregation queries,
20 of them ``shard in 30`` over the ledger) against a tick of ``trends.record`` now (the window's 4 totals, then
per provider only the kinds that moved): idle, after one new entry, idle again. Emulator CPU ms (from /proc) and
wall ms of each. Run: ``.venv/bin/python benchmarks/trends_tick.py``. Prints figures; asserts nothing.
"""

from __future__ import annotations

import os
import signal
import sys
import tempfile
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from google.cloud import firestore  # noqa: E402

from infra.local import emulators  # noqa: E402
from infra.topology import load  # noqa: E402
from shared.state import aggregates, trends  # noqa: E402
from shared.state.documents import SHARDS  # noqa: E402

ENTRIES = int(os.environ.get("BENCH_TRENDS_ENTRIES", "500"))


def group_cpu(pgid: int) -> float:
    """CPU seconds of every process in the group (the emulator's launch script and its Java child)."""
    total = 0
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[2]) == pgid:
            total += int(fields[11]) + int(fields[12])
    return total / os.sysconf("SC_CLK_TCK")


def entry(db, name: str, at: datetime, shard: int) -> None:
    db.collection("events").document(name).set({"provider": "aws", "outcome": "applied", "shard": shard,
                                                 "recordedAt": at.strftime("%Y-%m-%dT%H:%M:%S.%fZ")})


def measure(proc, what) -> str:
    cpu, wall = group_cpu(proc.pid), time.monotonic()
    what()
    return f"{(group_cpu(proc.pid) - cpu) * 1000:6.0f} ms CPU ({(time.monotonic() - wall) * 1000:,.0f} ms wall)"


def main() -> None:
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(1))  # the emulator stopped below either way
    proc = emulators.start("firestore", Path(tempfile.mkdtemp(prefix="bench-trends-")))
    try:
        os.environ["FIRESTORE_EMULATOR_HOST"] = proc.host
        db = firestore.Client(project="bench-trends")
        providers = list(load().providers)
        m = datetime.now(timezone.utc).replace(second=0, microsecond=0) - timedelta(minutes=1)
        for i in range(ENTRIES):
            entry(db, f"e{i}", m - timedelta(minutes=30) + timedelta(seconds=i * 1800 / ENTRIES), i % SHARDS)
        trends.record(db, providers, m + timedelta(seconds=10), 5)  # the windows' first counts
        every = lambda: aggregates.counts(trends.queries(db, providers, m, m + timedelta(seconds=20)))  # noqa: E731
        tick = lambda s: lambda: trends.record(db, providers, m + timedelta(seconds=s), 5)  # noqa: E731
        print(f"the trends, one window ({ENTRIES} ledger entries, {len(providers)} providers), Firestore emulator:")
        print(f"  before issue 42, every count per provider:  {measure(proc, every)}")
        print(f"  now, an idle tick (the 4 totals):            {measure(proc, tick(20))}")
        entry(db, "late", m + timedelta(seconds=5), 3)
        print(f"  now, after one new entry (+ applied each):   {measure(proc, tick(30))}")
        print(f"  now, idle again:                             {measure(proc, tick(40))}")
    finally:
        proc.stop()


if __name__ == "__main__":
    main()
