"""The local stack's process handling fails loudly, with the log, never silently."""

import sys
import time
from pathlib import Path

import pytest

from infra.local import emulators


def test_a_process_dying_at_start_up_is_reported_with_its_log(tmp_path):
    log = tmp_path / "x.log"
    pid = emulators.spawn([sys.executable, "-c", "import sys; print('BindException: port taken'); sys.exit(3)"], log)
    with pytest.raises(emulators.EmulatorError, match="BindException"):
        emulators.wait_http(emulators.Process(pid, emulators.free_port()), "thing", log, timeout=10)


def test_stop_kills_the_whole_process_group(tmp_path):
    pid = emulators.spawn([sys.executable, "-c", "import subprocess, time; "
                           "subprocess.Popen(['sleep', '60']); time.sleep(60)"], tmp_path / "y.log")
    proc = emulators.Process(pid, 0)
    assert proc.alive()
    proc.stop(timeout=2)
    assert not proc.alive()


def test_stop_all_gives_each_its_sigterm_and_kills_the_ones_that_stay(tmp_path):
    """Each gets its SIGTERM (its chance to end cleanly); the ones that ignore it are killed once the grace
    period ends, and stop_all returns once they are gone."""
    marks = tmp_path / "terms"
    script = (f"import signal, time\n"
              f"signal.signal(signal.SIGTERM, lambda *_: open({str(marks)!r}, 'a').write('term\\n'))\n"
              f"open({str(marks)!r} + '.ready', 'a').write('r\\n')\ntime.sleep(60)")
    procs = [emulators.Process(emulators.spawn([sys.executable, "-c", script], tmp_path / f"{n}.log"), 0)
             for n in range(3)]
    deadline = time.monotonic() + 20
    while time.monotonic() < deadline and not (Path(f"{marks}.ready").exists()
                                               and len(Path(f"{marks}.ready").read_text().split()) == 3):
        time.sleep(0.05)
    emulators.stop_all(procs, timeout=0.5)
    assert not any(p.alive() for p in procs)
    assert marks.read_text().split() == ["term"] * 3


def test_missing_emulator_says_how_to_install(monkeypatch, tmp_path):
    monkeypatch.setattr(emulators, "sdk_root", lambda: tmp_path)
    with pytest.raises(emulators.EmulatorError, match="make install"):
        emulators.launch_command("pubsub", 1234)


def test_down_never_kills_a_process_it_did_not_start(tmp_path):
    """A stale state file (after a reboot, say) may name pids now used by something else."""
    import json

    from infra.local.stack import LocalStack

    stranger = emulators.spawn([sys.executable, "-c", "import time; time.sleep(30)"], tmp_path / "s.log")
    try:
        stack = LocalStack(tmp_path)
        (tmp_path / "state.json").write_text(json.dumps({
            "project": "p", "pubsub": {"pid": stranger, "port": 1}, "firestore": {"pid": stranger, "port": 2}}))
        assert stack.down()
        assert emulators.Process(stranger, 0).alive()
    finally:
        emulators.Process(stranger, 0).stop(timeout=1)
