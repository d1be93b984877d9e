"""Where ingest's and upsert's CPU goes under load: py-spy on their servers (and on the minimal handlers'),
while benchmarks/pipeline.py's pipeline runs (fan-out detached).

    .venv/bin/pip install py-spy && .venv/bin/python benchmarks/profile_functions.py [OUT_DIR]

Writes one collapsed-stack file (flame graph input) per server to OUT_DIR (default: a temporary
directory) and prints each one's top functions by own samples and by inclusive samples. Not part of
``make bench`` (py-spy is not a dependency): issue 32's profile, to re-run after a change.
"""

from __future__ import annotations

import collections
import shutil
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import pipeline  # noqa: E402
from pipeline import MIN_LEDGER, MIN_TOPICS, bench_stack, detach_fan_out, start_minimal, throughput  # noqa: E402

TOP = 25
PROFILED = ("ingest", "upsert", "min_ingest", "min_upsert")


def py_spy() -> str:
    found = Path(sys.executable).parent / "py-spy"
    if found.exists():
        return str(found)
    if shutil.which("py-spy"):
        return "py-spy"
    raise SystemExit("py-spy is not installed: .venv/bin/pip install py-spy")


def record(pid: int, out: Path, fmt: str) -> subprocess.Popen:
    """py-spy sampling the keeper ``pid`` and its children (gunicorn's master and worker), the thread holding
    the GIL only (threads waiting on a lock, a socket or a gRPC call would count as busy otherwise)."""
    return subprocess.Popen([py_spy(), "record", "--pid", str(pid), "--subprocesses", "--rate", "200", "--gil",
                             "--format", fmt, "--output", str(out), "--nonblocking"],
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def top(collapsed: Path) -> None:
    """The functions with the most samples: own (the frame on top) and inclusive (anywhere in the stack)."""
    own, inclusive, total = collections.Counter(), collections.Counter(), 0
    for line in collapsed.read_text().splitlines():
        stack, _, count = line.rpartition(" ")
        frames = [f.split(" (")[0] + " (" + f.split(" (")[1].split(":")[0].rsplit("/", 1)[-1] + ")"
                  for f in stack.split(";") if " (" in f and not f.startswith("process ")]
        if not frames:
            continue
        n = int(count)
        total += n
        own[frames[-1]] += n
        for frame in set(frames):
            inclusive[frame] += n
    print(f"== {collapsed.stem}: {total} samples")
    print("  own:")
    for frame, n in own.most_common(TOP):
        print(f"    {n / total:6.1%}  {frame}")
    print("  inclusive:")
    for frame, n in inclusive.most_common(TOP):
        print(f"    {n / total:6.1%}  {frame}")


def main() -> None:
    out_dir = Path(sys.argv[1]) if len(sys.argv) > 1 else Path(tempfile.mkdtemp(prefix="profile-"))
    out_dir.mkdir(parents=True, exist_ok=True)
    with bench_stack() as (stack, state, db, publisher, extra):
        detach_fan_out(stack, state)
        groups = {name: f["pid"] for name, f in state.functions.items()}
        extra.extend(start_minimal(stack, state, groups))
        real, least = (publisher.topic_path(state.project, t) for t in ("dcm-status-ingress-aws", MIN_TOPICS["ingest"]))
        throughput(db, publisher, real, "warm", 100)
        throughput(db, publisher, least, "min-warm", 100, MIN_LEDGER)
        spies = [record(groups[name], out_dir / f"{name}.txt", "raw") for name in PROFILED]
        throughput(db, publisher, real, "prof", pipeline.THROUGHPUT_EVENTS)
        throughput(db, publisher, least, "min-prof", pipeline.THROUGHPUT_EVENTS, MIN_LEDGER)
        for spy in spies:
            spy.send_signal(signal.SIGINT)
        for spy in spies:
            spy.wait(timeout=60)
    for name in PROFILED:
        top(out_dir / f"{name}.txt")
    print(f"collapsed stacks (flamegraph.pl, speedscope): {out_dir}/*.txt")


if __name__ == "__main__":
    main()
