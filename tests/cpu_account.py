"""Which processes a test run's CPU goes to (issue 41): run a command, walk /proc while it runs, and print
its CPU seconds by process class and tier when it ends.

    python -m tests.cpu_account [--interval 0.25] [--json PATH] -- make test-fast test-e2e ...

(``make test CPU_ACCOUNT=1`` runs ``make test``'s tiers under it.) Every process descended from the
command is followed, also after its parent died and it was handed to init (the stacks' keepers start in new
sessions), and so is any process whose environment carries the run's tag. A process's CPU is its
utime + stime as last sampled; what a process used after its last sample, and the whole CPU of children
too short-lived to be sampled, reach its parent's cutime + cstime when the parent reaps it: that remainder
is counted as "exited children of" the parent's class. The table is the run's CPU, not the machine's:
other jobs on a shared machine do not count, so it is the steadier figure than wall time there.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from pathlib import Path

TAG = "DCM_CPU_ACCOUNT_TAG"
TICK = os.sysconf("SC_CLK_TCK")
TIERS = ("fast", "e2e", "reliability", "other")

# (pattern over the command line, class); the first that matches names the process. A Python process's
# command line is its interpreter and arguments; a JVM's its java command and main class. (Before 2026-11-29
# a function's keeper counted as its server.)
_CLASSES = (
    (re.compile(r"java .*(cloud-firestore-emulator|CloudFirestore|firestore)", re.I), "firestore emulator (JVM)"),
    (re.compile(r"java .*pubsub", re.I), "pubsub emulator (JVM)"),
    (re.compile(r"(firestore|pubsub).emulator"), "emulator launch scripts"),
    (re.compile(r"infra\.local\.supervise --name (\S+)"), "keeper of: {0}"),  # its command line holds the server's
    (re.compile(r"functions-framework .*--target (\S+)"), "function server: {0}"),
    (re.compile(r"functions\.nats_ingress"), "function server: nats_ingress"),
    (re.compile(r"infra\.local\.faultproxy"), "fault proxy"),
    (re.compile(r"nats-server"), "nats-server"),
    (re.compile(r"chrom(e|ium)|headless_shell", re.I), "chromium"),
    (re.compile(r"import sys;exec\(eval\(sys\.stdin"), "pytest worker"),
    (re.compile(r"-m pytest|/pytest "), "pytest controller"),
    (re.compile(r"infra\.reliability"), "reliability harness"),
    (re.compile(r"dcm-status|infra\.cli"), "CLI subprocesses (dcm-status)"),
    (re.compile(r"terraform"), "terraform"),
    (re.compile(r"checkov"), "checkov"),
    (re.compile(r"\buv\b|pip |-m venv|ensurepip"), "pip/uv/venv (clean virtualenvs)"),
    (re.compile(r"^(make|/usr/bin/make|sh |/bin/sh |bash )"), "make/shells"),
)


def classify(cmdline: str) -> str:
    for pattern, name in _CLASSES:
        found = pattern.search(cmdline)
        if found:
            return name.format(*found.groups()) if "{0}" in name else name
    return "other: " + _program(cmdline.split())


def _program(argv: list[str]) -> str:
    """A command's program, and for an interpreter what it runs (``python -m build``, ``python x.py``)."""
    name = Path(argv[0]).name if argv else "?"
    rest = [a for a in argv[1:] if a not in ("-u", "-E", "-s", "-I", "-B")]
    if not name.startswith("python") or not rest:
        return name or "?"
    if rest[0] == "-m" and len(rest) > 1:
        return f"{name} -m {rest[1]}"
    return f"{name} {rest[0] if rest[0] == '-c' else Path(rest[0]).name}"


def tier_of(cmdline: str) -> str | None:
    """The tier a process starts, if it is one of ``make test``'s roots (its pytest run or the reliability
    run); None for every other process (it inherits its parent's)."""
    if "infra.reliability" in cmdline:
        return "reliability"
    if "pytest" in cmdline and "tests/e2e" in cmdline:
        return "e2e"
    if "pytest" in cmdline and ("tests/unit" in cmdline or "tests/functional" in cmdline):
        return "fast"
    return None


@dataclass
class Seen:
    """One followed process as last sampled: its class and tier, its CPU and its reaped children's (ticks)."""
    ppid: int
    name: str
    tier: str
    own: int = 0
    children: int = 0
    children_at_start: int = 0
    seen_children: int = 0  # own + children of this process's children that were seen and are gone
    samples: int = 0


@dataclass
class Account:
    tag: str
    root: int
    followed: dict[int, Seen] = field(default_factory=dict)
    passed: set[int] = field(default_factory=set)  # processes not ours: not read again while they live
    ticks: dict[tuple[str, str], int] = field(default_factory=lambda: defaultdict(int))

    def sample(self) -> None:
        pids = set(_pids())
        self.passed &= pids
        alive = {}
        for pid in pids - self.passed:
            stat = _stat(pid)
            if stat is not None:
                alive[pid] = stat
        for pid, stat in alive.items():
            if pid in self.followed:
                self._update(self.followed[pid], pid, stat)
            else:
                self._maybe_follow(pid, stat)
        for pid in [p for p in self.followed if p not in alive]:
            self._gone(pid)

    def _maybe_follow(self, pid: int, stat: tuple[int, int, int]) -> None:
        ppid = stat[0]
        if pid != self.root and ppid not in self.followed and not _tagged(pid, self.tag):
            self.passed.add(pid)
            return
        cmdline = _cmdline(pid)
        parent = self.followed.get(ppid)
        tier = tier_of(cmdline) or (parent.tier if parent else _tier_of_test(pid))
        seen = Seen(ppid, classify(cmdline), tier, children_at_start=stat[2])
        self.followed[pid] = seen
        self._update(seen, pid, stat)

    def _update(self, seen: Seen, pid: int, stat: tuple[int, int, int]) -> None:
        seen.ppid, seen.own, seen.children = stat[0], stat[1], stat[2]
        seen.samples += 1
        if seen.samples <= 3 or seen.name.startswith("other") or seen.name == "make/shells":
            cmdline = _cmdline(pid)  # a fork that has since exec'd
            if cmdline:
                seen.name = classify(cmdline)
                seen.tier = tier_of(cmdline) or seen.tier

    def _gone(self, pid: int) -> None:
        seen = self.followed.pop(pid)
        self.ticks[(seen.name, seen.tier)] += seen.own
        self._settle_children(seen)
        parent = self.followed.get(seen.ppid)
        if parent is not None:
            parent.seen_children += seen.own + seen.children

    def _settle_children(self, seen: Seen) -> None:
        """The reaped children's CPU this process's samples did not see (their last moments, or their whole
        life when shorter than an interval)."""
        unseen = seen.children - seen.children_at_start - seen.seen_children
        if unseen > 0:
            self.ticks[(f"exited children of: {seen.name}", seen.tier)] += unseen

    def finish(self) -> None:
        """Every process still followed, counted as last sampled (the command's own last interval is not)."""
        for pid in list(self.followed):
            self._gone(pid)


def _pids() -> list[int]:
    return [int(name) for name in os.listdir("/proc") if name.isdigit()]


def _stat(pid: int) -> tuple[int, int, int] | None:
    """(ppid, utime + stime, cutime + cstime) in clock ticks, or None if it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2:].split()
    return int(fields[1]), int(fields[11]) + int(fields[12]), int(fields[13]) + int(fields[14])


def _cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        return ""


def _tier_of_test(pid: int) -> str:
    """The tier of the test a process was started by (pytest's PYTEST_CURRENT_TEST in its environment), for a
    process first seen after its parent was gone (an emulator a `dcm-status up` of a test restarted)."""
    try:
        found = re.search(rb"PYTEST_CURRENT_TEST=tests/(\w+)/", Path(f"/proc/{pid}/environ").read_bytes())
    except OSError:
        return "other"
    if found is None:
        return "other"
    return "e2e" if found.group(1) == b"e2e" else "fast"


def _tagged(pid: int, tag: str) -> bool:
    try:
        return f"{TAG}={tag}".encode() in Path(f"/proc/{pid}/environ").read_bytes()
    except OSError:
        return False


def table(ticks: dict[tuple[str, str], int], wall: float, own_cpu: float) -> str:
    """The CPU seconds by class (rows, largest first) and tier (columns)."""
    rows: dict[str, dict[str, float]] = defaultdict(lambda: dict.fromkeys(TIERS, 0.0))
    for (name, tier), count in ticks.items():
        rows[name][tier] += count / TICK
    width = max([len(name) for name in rows] + [5])
    lines = [f"{'class':<{width}} " + " ".join(f"{t:>11}" for t in TIERS) + f" {'total':>9}"]
    ordered = sorted(rows.items(), key=lambda item: -sum(item[1].values()))
    for name, by_tier in ordered:
        if sum(by_tier.values()) >= 0.05:
            lines.append(f"{name:<{width}} " + " ".join(f"{by_tier[t]:>11.1f}" for t in TIERS)
                         + f" {sum(by_tier.values()):>9.1f}")
    totals = {t: sum(r[t] for r in rows.values()) for t in TIERS}
    lines.append(f"{'total':<{width}} " + " ".join(f"{totals[t]:>11.1f}" for t in TIERS)
                 + f" {sum(totals.values()):>9.1f}")
    lines.append(f"wall {wall:.0f} s; CPU {sum(totals.values()):.0f} s ({sum(totals.values()) / wall:.2f} cores); "
                 f"the sampler itself {own_cpu:.1f} s")
    return "\n".join(lines)


def run(command: list[str], interval: float) -> tuple[int, Account, float]:
    tag = uuid.uuid4().hex
    started = time.monotonic()
    proc = subprocess.Popen(command, env={**os.environ, TAG: tag})
    account = Account(tag, proc.pid)
    while proc.poll() is None:
        account.sample()
        time.sleep(interval)
    account.finish()
    return proc.returncode, account, time.monotonic() - started


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--interval", type=float, default=0.25, help="seconds between two walks of /proc")
    parser.add_argument("--json", type=Path, help="also write {class: {tier: seconds}} here")
    parser.add_argument("command", nargs="+")
    args = parser.parse_args(argv)
    code, account, wall = run(args.command, args.interval)
    own = sum(os.times()[:2])
    print("\nCPU seconds by process class and tier (tests/cpu_account.py)\n" + table(account.ticks, wall, own),
          flush=True)
    if args.json:
        out: dict[str, dict[str, float]] = defaultdict(dict)
        for (name, tier), count in account.ticks.items():
            out[name][tier] = round(count / TICK, 2)
        args.json.write_text(json.dumps({"wall": round(wall, 1), "classes": out}, indent=1, sort_keys=True))
    return code


if __name__ == "__main__":
    sys.exit(main())
