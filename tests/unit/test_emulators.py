"""The local stack's process handling fails loudly, with the log, never silently."""

import sys

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
