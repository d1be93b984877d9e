"""Where a test run's time goes, tier by tier (the tier: the folder under tests/, issue 41).

A pytest plugin (tests/conftest.py loads it): ``--tier-durations=N`` prints, at the end of the run, the N
slowest tests and the N slowest files of each tier, a test's time being its setup + call + teardown (a
fixture of session or module scope is paid by the first test that asks for it), beside the CPU seconds the
test used (its process's and those of the subprocesses it waited for: on a busy machine the steadier
figure); ``--tier-durations-json=PATH`` writes every test's seconds for a later comparison. It works under
pytest-xdist (the controller sees every worker's reports).

As a script, the files of two runs side by side (each a JSON file written above, or the text of a run with
``--durations=0``)::

    python -m tests.durations BEFORE AFTER [--top 15]
"""

from __future__ import annotations

import argparse
import json
import re
import resource
from collections import defaultdict
from pathlib import Path
from typing import Iterable, Mapping

import pytest

_LINE = re.compile(r"^(?P<seconds>[0-9.]+)s (?:setup|call|teardown)\s+(?P<nodeid>\S+)")


def tier_of(nodeid: str) -> str:
    parts = nodeid.split("::")[0].split("/")
    return parts[1] if len(parts) > 2 and parts[0] == "tests" else parts[0]


def file_of(nodeid: str) -> str:
    return nodeid.split("::")[0]


def by_tier(seconds: Mapping[str, float]) -> dict[str, dict[str, float]]:
    tiers: dict[str, dict[str, float]] = defaultdict(dict)
    for nodeid, value in seconds.items():
        tiers[tier_of(nodeid)][nodeid] = value
    return dict(tiers)


def per_file(seconds: Mapping[str, float]) -> dict[str, float]:
    files: dict[str, float] = defaultdict(float)
    for nodeid, value in seconds.items():
        files[file_of(nodeid)] += value
    return dict(files)


def slowest(seconds: Mapping[str, float], top: int) -> list[tuple[str, float]]:
    return sorted(seconds.items(), key=lambda item: -item[1])[:top]


def summary(seconds: Mapping[str, float], top: int, cpu: Mapping[str, float] | None = None) -> Iterable[str]:
    """The lines printed at the end of a run: per tier, its total, its slowest tests and files."""
    cpu = cpu or {}
    cpu_files = per_file(cpu)
    for tier, tests in sorted(by_tier(seconds).items()):
        used = sum(cpu.get(nodeid, 0.0) for nodeid in tests)
        yield (f"tier {tier}: {len(tests)} tests, {sum(tests.values()):.1f} s wall (setup + call + teardown, "
               f"summed), {used:.1f} s CPU")
        yield f"  the {top} slowest tests (wall, CPU):"
        yield from (f"  {value:8.2f} s {cpu.get(nodeid, 0.0):8.2f} s  {nodeid}" for nodeid, value in slowest(tests, top))
        files = per_file(tests)
        yield f"  the {top} slowest of its {len(files)} files (wall, CPU):"
        yield from (f"  {value:8.2f} s {cpu_files.get(name, 0.0):8.2f} s  {name}" for name, value in slowest(files, top))


def cpu_seconds() -> float:
    """CPU used so far by this process and by the subprocesses it has waited for."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


class CpuClock:
    """In the process that runs the tests: each test's CPU seconds, carried by its teardown report."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_runtest_setup(self, item: pytest.Item) -> None:
        item.stash[_STARTED] = cpu_seconds()

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item: pytest.Item, call: pytest.CallInfo):
        if call.when == "teardown" and _STARTED in item.stash:
            item.user_properties.append((_CPU, cpu_seconds() - item.stash[_STARTED]))
        yield


_STARTED = pytest.StashKey[float]()
_CPU = "cpu_seconds"


class Recorder:
    """Adds up each test's phases as the reports arrive; prints (and writes) them at the end."""

    def __init__(self, top: int, json_path: str | None):
        self.top = top
        self.json_path = json_path
        self.seconds: dict[str, float] = defaultdict(float)
        self.cpu: dict[str, float] = {}

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.seconds[report.nodeid] += report.duration
        self.cpu.update((report.nodeid, value) for name, value in report.user_properties if name == _CPU)

    def pytest_terminal_summary(self, terminalreporter) -> None:
        if self.json_path:
            Path(self.json_path).write_text(json.dumps({"wall": self.seconds, "cpu": self.cpu}, indent=0,
                                                       sort_keys=True))
        if self.top and self.seconds:
            terminalreporter.write_sep("=", "where the time went, by tier (tests/durations.py)")
            for line in summary(self.seconds, self.top, self.cpu):
                terminalreporter.write_line(line)


def add_options(parser: pytest.Parser) -> None:
    group = parser.getgroup("tier-durations")
    group.addoption("--tier-durations", type=int, default=0, metavar="N",
                    help="print the N slowest tests and files of each tier at the end")
    group.addoption("--tier-durations-json", default=None, metavar="PATH",
                    help="write every test's seconds (setup + call + teardown) to PATH as JSON")


def configure(config: pytest.Config) -> None:
    top, json_path = config.getoption("tier_durations"), config.getoption("tier_durations_json")
    if not (top or json_path):
        return
    config.pluginmanager.register(CpuClock(), "tier-durations-cpu")
    if not hasattr(config, "workerinput"):  # an xdist worker's reports are recorded by its controller
        config.pluginmanager.register(Recorder(top, json_path), "tier-durations")


def load(path: Path) -> tuple[dict[str, float], dict[str, float]]:
    """A run's wall and CPU seconds per test: the JSON this plugin writes, or the text of ``pytest
    --durations=0`` (wall only)."""
    text = path.read_text()
    if text.lstrip().startswith("{"):
        run = json.loads(text)
        return run["wall"], run["cpu"]
    seconds: dict[str, float] = defaultdict(float)
    for line in text.splitlines():
        found = _LINE.match(line.strip())
        if found:
            seconds[found["nodeid"]] += float(found["seconds"])
    return dict(seconds), {}


def compare(before: Mapping[str, float], after: Mapping[str, float], top: int, kind: str) -> Iterable[str]:
    """Per tier, its total before and after, then its slowest files (by the larger of the two)."""
    tiers_before, tiers_after = by_tier(before), by_tier(after)
    for tier in sorted(set(tiers_before) | set(tiers_after)):
        old, new = per_file(tiers_before.get(tier, {})), per_file(tiers_after.get(tier, {}))
        yield (f"tier {tier}, {kind}: {sum(old.values()):.1f} s -> {sum(new.values()):.1f} s "
               f"({len(tiers_before.get(tier, {}))} -> {len(tiers_after.get(tier, {}))} tests)")
        names = sorted(set(old) | set(new), key=lambda name: -max(old.get(name, 0), new.get(name, 0)))[:top]
        yield from (f"  {old.get(name, 0):8.2f} s -> {new.get(name, 0):8.2f} s  {name}" for name in names)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("before", type=Path)
    parser.add_argument("after", type=Path, nargs="?")
    parser.add_argument("--top", type=int, default=15)
    args = parser.parse_args(argv)
    (wall, cpu) = load(args.before)
    if args.after is None:
        print("\n".join(summary(wall, args.top, cpu)))
        return
    (wall_after, cpu_after) = load(args.after)
    print("\n".join(compare(wall, wall_after, args.top, "wall")))
    if cpu and cpu_after:
        print("\n".join(compare(cpu, cpu_after, args.top, "CPU")))


if __name__ == "__main__":
    main()
