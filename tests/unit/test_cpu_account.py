"""tests/cpu_account.py: a run's CPU by process class, the short-lived processes' included (issue 41)."""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys

import pytest

from tests import cpu_account

BURN = "import time\nend = time.process_time() + {seconds}\nwhile time.process_time() < end: pass\n"


@pytest.mark.parametrize("cmdline, name", [
    ("java -Duser.language=en -cp /sdk/platform/cloud-firestore-emulator/cloud-firestore-emulator.jar "
     "com.google.cloud.datastore.emulator.firestore.CloudFirestore start", "firestore emulator (JVM)"),
    ("java -jar /sdk/platform/pubsub-emulator/lib/cloud-pubsub-emulator-0.8.20-all.jar --port=1",
     "pubsub emulator (JVM)"),
    ("/r/.venv/bin/python /r/.venv/bin/functions-framework --target upsert --source /r/functions/upsert/main.py",
     "function server: upsert"),
    ("/r/.venv/bin/python -m infra.local.supervise --name sweep --pidfile /s/run/sweep.pid --tick t --every 5 -- "
     "/r/.venv/bin/functions-framework --target sweep", "keeper of: sweep"),
    ("/r/.venv/bin/python -u -c import sys;exec(eval(sys.stdin.readline()))", "pytest worker"),
    ("/r/.venv/bin/python /r/.venv/bin/dcm-status callbacks add --hook x", "CLI subprocesses (dcm-status)"),
    ("/usr/lib/chromium/chromium --type=renderer", "chromium"),
    ("/r/venv/bin/python -E -s -c import main", "other: python -c"),
    ("python3 -m build --wheel", "other: python3 -m build"),
])
def test_a_process_is_named_by_its_command_line(cmdline, name):
    assert cpu_account.classify(cmdline) == name


def test_the_tier_is_the_pytest_run_or_the_reliability_run_that_started_it():
    assert cpu_account.tier_of("python -m pytest -n 2 tests/unit tests/functional tests/deploy") == "fast"
    assert cpu_account.tier_of("python -m pytest -n 2 tests/e2e") == "e2e"
    assert cpu_account.tier_of("python -m infra.reliability --quick") == "reliability"
    assert cpu_account.tier_of("make test-fast") is None


def test_a_child_too_short_lived_to_be_sampled_is_counted_through_its_parent(tmp_path):
    """The child burns 0.2 s and is gone long before the next walk of /proc (1 s): its CPU reaches the
    table through its parent's cutime, and the table's total is what the run's processes used (the parent
    idles at the end: its own last interval is not sampled)."""
    child = BURN.format(seconds=0.2)
    parent = (BURN.format(seconds=0.2) + f"import subprocess, sys, time\n"
              f"subprocess.run([sys.executable, '-c', {child!r}], check=True)\ntime.sleep(2.5)\n")
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    code = cpu_account.main(["--interval", "1", "--json", str(tmp_path / "cpu.json"), "--",
                             sys.executable, "-c", parent])
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    used = (after.ru_utime + after.ru_stime) - (before.ru_utime + before.ru_stime)
    classes = json.loads((tmp_path / "cpu.json").read_text())["classes"]
    total = sum(sum(by_tier.values()) for by_tier in classes.values())
    assert code == 0
    assert used >= 0.4 and abs(total - used) <= 0.05, (total, used, classes)
    assert set(classes) <= {"other: python3 -c", "other: python -c", "exited children of: other: python3 -c",
                            "exited children of: other: python -c"}, classes


def test_a_process_whose_parent_was_never_seen_takes_the_tier_of_the_test_that_started_it():
    """An emulator a test's `dcm-status up` restarted outlives the CLI: its tier comes from its environment."""
    env = {**os.environ, "PYTEST_CURRENT_TEST": "tests/e2e/test_reliability.py::test_up (call)"}
    started = [subprocess.Popen(["sleep", "5"], env=e) for e in (env, {"PATH": os.environ["PATH"]})]
    try:
        assert [cpu_account._tier_of_test(p.pid) for p in started] == ["e2e", "other"]
    finally:
        for p in started:
            p.kill()
            p.wait()
