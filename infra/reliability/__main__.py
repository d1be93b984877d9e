"""``python -m infra.reliability``: run the scenarios (all, or ``--only`` some), print the table, write it."""

from __future__ import annotations

import argparse
import random
import sys
import tempfile
import uuid
from pathlib import Path

import infra.reliability
from infra.local import emulators
from infra.local.stack import LocalStack
from infra.reliability.harness import PROVIDERS, Harness
from infra.reliability.accounting import HEADER, Row
from infra.reliability.nats_scenarios import NATS_BURST, nats_killed, poisoned_nats
from infra.reliability.report import markdown
from infra.reliability.scenarios import (
    burst,
    collisions,
    flooding,
    fuzz,
    hot_resource,
    killed,
    killed_under_load,
    outage,
    spoofing,
)


def selected(name: str, only: list[str] | None) -> bool:
    """Whether scenario ``name`` runs: all of them, or those whose name contains one of ``only``."""
    return not only or any(o.lower() in name.lower() for o in only)


def run(events: int, quick: bool, only: list[str] | None = None) -> list[Row]:
    rng = random.Random(7)
    state_dir = Path(tempfile.mkdtemp(prefix="dcm-reliability-"))
    stack = LocalStack(state_dir, project=f"dcm-rel-{uuid.uuid4().hex[:6]}", heaps=emulators.LARGE_HEAP)
    state = stack.up(PROVIDERS, chaos=True)
    rows: list[Row] = []
    h: Harness | None = None
    try:
        h = Harness(stack, state)
        small = max(100, events // 10)
        loaded = 300 if quick else small  # the paced burst: 300 updates with upsert killed halfway
        scenarios = [("burst", lambda: burst(h, events, rng)),
                     ("outage 10 s", lambda: outage(h, small, rng, 10, "outage 10 s")),
                     ("hot resource", lambda: hot_resource(h, 300 if quick else 1000)),
                     ("flooding provider", lambda: flooding(h, small, rng)),
                     ("spoofed provider", lambda: spoofing(h, 50 if quick else 200)),
                     ("cross-provider collisions", lambda: collisions(h, small, rng))]
        scenarios += [("function killed", lambda: killed(h, small, rng)),
                      ("server killed under load", lambda: killed_under_load(h, loaded, rng, "server")),
                      ("worker killed under load", lambda: killed_under_load(h, loaded, rng, "worker")),
                      ("outage > retries", lambda: outage(h, 100 if quick else 300, rng,
                                                          stack.outage_beyond_retries(state), "outage > retries")),
                      ("nats ingress killed", lambda: nats_killed(h, min(events, NATS_BURST), rng)),
                      ("poisoned NATS provider", lambda: poisoned_nats(h))]
        for name, scenario in scenarios:
            if not selected(name, only):
                continue
            h.reset()
            row = scenario()
            rows.append(row)
            print(row.line(), flush=True)
    finally:
        if h is not None:
            h.close()
        stack.down()
    if selected("fuzz (hypothesis)", only):
        row = fuzz(events)
        rows.append(row)
        print(row.line(), flush=True)
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m infra.reliability", description=infra.reliability.__doc__.splitlines()[0])
    parser.add_argument("--events", type=int, default=10_000, help="messages in the burst and fuzz inputs")
    parser.add_argument("--quick", action="store_true", help="a short run (CI): 300 events")
    parser.add_argument("--write", type=Path, default=None, help="write the table as Markdown here")
    parser.add_argument("--only", action="append", metavar="SCENARIO",
                        help="run only the scenarios whose name contains this (repeatable), e.g. --only 'under load'")
    args = parser.parse_args(argv)
    events = 300 if args.quick else args.events
    print(HEADER, flush=True)
    rows = run(events, args.quick, args.only)
    if args.write:
        args.write.write_text(markdown(rows, events))
        print(f"wrote {args.write}")
    bad = [r.scenario for r in rows if r.lost or r.wrong or r.errors]
    if bad:
        print(f"FAILED: {', '.join(bad)}", file=sys.stderr)
    print(f"reliability: {len(rows) - len(bad)} passed, {len(bad)} failed")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
