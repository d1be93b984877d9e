"""The mistakes people make with ``dcm-status`` without a running stack: each ends with one line on
stderr and a non-zero exit, never a traceback; run through click's runner and through ``main``, the function
the installed script calls, in this process (its real argv, environment and stderr). The installed script
itself, a Python start-up each, runs where the process is the point: a few mistakes and the help, in a fresh
interpreter whose import-time warnings would reach stderr. (With a stack: tests/e2e/test_cli.py.)"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import sys
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest
from click.testing import CliRunner

from infra.cli import cli, main

SCRIPT = str(Path(sys.executable).parent / "dcm-status")
PUBLISH = ["publish", "--type", "vm", "--id", "i-1", "--status", "RUNNING"]


@pytest.fixture
def env(tmp_path, monkeypatch):
    """No local stack, no Google Cloud or AWS credentials, nothing left from another shell."""
    clean = {k: v for k, v in os.environ.items()
             if not k.startswith(("DCM_", "PUBSUB_", "FIRESTORE_", "GOOGLE_", "AWS_", "CLOUDSDK_"))}
    clean.update({"DCM_STATE_DIR": str(tmp_path / "state"), "CLOUDSDK_CONFIG": str(tmp_path / "gcloud"),
                  "GOOGLE_APPLICATION_CREDENTIALS": str(tmp_path / "no-credentials.json"),
                  "AWS_CONFIG_FILE": str(tmp_path / "no-aws-config"),
                  "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "no-aws-credentials"),
                  "AWS_EC2_METADATA_DISABLED": "true", "COLUMNS": "80"})
    return clean


@dataclass(frozen=True)
class Ran:
    code: int
    stdout: str
    stderr: str


@pytest.fixture
def entry_point(env, monkeypatch, capfd):
    """``entry_point(args, extra_env)``: ``main`` run as the installed script runs it (sys.argv, exactly this
    environment, its exit code), in this process: what it wrote to stdout and stderr (the file descriptors)."""
    def run(args: list[str], extra: dict[str, str] | None = None) -> Ran:
        wanted = {**env, **(extra or {})}
        for name in [n for n in os.environ if n not in wanted]:
            monkeypatch.delenv(name)
        for name, value in wanted.items():
            monkeypatch.setenv(name, value)
        monkeypatch.setattr(sys, "argv", [SCRIPT, *args])
        capfd.readouterr()  # nothing written before it counts
        with pytest.raises(SystemExit) as exited:
            main()
        out, err = capfd.readouterr()
        code = exited.value.code
        return Ran(code if isinstance(code, int) else (0 if code is None else 1), out, err)
    return run


def script(args: list[str], env: dict[str, str]) -> Ran:
    """The installed ``dcm-status`` in a process of its own (a Python start-up: only where that is the point)."""
    result = subprocess.run([SCRIPT, *args], env=env, capture_output=True, text=True, timeout=120)
    return Ran(result.returncode, result.stdout, result.stderr)


@pytest.fixture
def listener():
    """Something answering on a port (stands for an emulator host; never spoken to)."""
    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen(16)
    accepted = []

    def accept() -> None:
        try:
            while True:
                accepted.append(server.accept()[0])  # held open, never answered
        except OSError:  # closed at the end of the test
            pass
    threading.Thread(target=accept, daemon=True).start()
    yield f"127.0.0.1:{server.getsockname()[1]}"
    server.close()
    for conn in accepted:
        conn.close()


def _dead_port() -> str:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"127.0.0.1:{s.getsockname()[1]}"


DEAD = _dead_port()
CASES = [
    # (name, args, extra env, exit code, what stderr says)
    ("bad provider name", [*PUBLISH, "--provider", "AWS!"], {}, 2, "invalid provider name 'AWS!'"),
    ("output spec not JSON", [*PUBLISH, "--provider", "aws", "--output-spec", "{host"], {}, 2, "--output-spec"),
    ("outputs not a map", [*PUBLISH, "--provider", "aws", "--outputs", "[1]"], {}, 2, "expected a JSON object"),
    ("negative limit", ["list", "--limit", "-1"], {}, 2, "--limit"),
    ("empty demo", ["demo", "--resources", "0"], {}, 2, "--resources"),
    ("huge duration", ["billing", "report", "--from", "99999999999d"], {}, 2, "before the year 1"),
    ("future billing window", ["billing", "report", "--from", "2999-01-01", "--to", "3000-01-01"], {}, 2,
     "starts in the future"),
    ("no stack, no project", ["list"], {}, 1, "the local stack is not running"),
    ("project without credentials", ["list"], {"DCM_PROJECT": "some-project"}, 1, "no Google Cloud credentials"),
    ("stale emulator environment", ["get", "aws/vm/i-1"], {"DCM_PROJECT": "p", "FIRESTORE_EMULATOR_HOST": DEAD},
     1, f"FIRESTORE_EMULATOR_HOST={DEAD} does not answer"),
    ("logs without a stack", ["logs"], {}, 1, "no local stack has run here"),
    ("aws provider, invalid endpoint", ["provider", "run-aws", "--once", "--endpoint-url", "not a url"], {}, 2,
     "is not an http(s) URL"),
    ("aws provider, bad interval", ["provider", "run-aws", "--interval", "0"], {}, 2, "--interval"),
    ("kubernetes provider, invalid api url", ["provider", "run-kubernetes", "--api-url", "not a url"], {}, 2,
     "is not an http(s) URL"),
    ("kubernetes provider, unknown kind", ["provider", "run-kubernetes", "--api-url", "https://k", "--kind", "nodes"],
     {}, 2, "--kind"),
    ("callback for a resource and a filter", ["callbacks", "add", "--hook", "https://h.example/cb", "--resource",
                                              "aws/vm/i-1", "--status", "STOPPED"], {}, 2, "takes no filter options"),
    ("callback for a malformed resource key", ["callbacks", "add", "--hook", "https://h.example/cb", "--resource",
                                               "aws"], {}, 2, "PROVIDER/TYPE/ID"),
    ("callback retried for no time", ["callbacks", "add", "--hook", "https://h.example/cb", "--retry-seconds", "0"],
     {}, 2, "--retry-seconds"),
]


@pytest.mark.parametrize("name, args, extra, code, says", CASES, ids=[c[0] for c in CASES])
def test_through_clicks_runner(env, name, args, extra, code, says):
    result = CliRunner().invoke(cli, args, env=_runner_env({**env, **extra}), catch_exceptions=False)
    _one_clear_line(result.exit_code, result.stderr, code, says)


@pytest.mark.parametrize("name, args, extra, code, says", CASES, ids=[c[0] for c in CASES])
def test_through_the_entry_point(entry_point, name, args, extra, code, says):
    ran = entry_point(args, extra)
    _one_clear_line(ran.code, ran.stderr, code, says)


# The installed script in a fresh interpreter: a mistake of usage (exit 2) and one the command meets (exit 1,
# Google Cloud's clients imported): nothing an import prints, no traceback, one line. (Every case above runs
# through the same entry point in process.)
SCRIPT_CASES = [c for c in CASES if c[0] in ("bad provider name", "project without credentials")]


@pytest.mark.parametrize("name, args, extra, code, says", SCRIPT_CASES, ids=[c[0] for c in SCRIPT_CASES])
def test_through_the_installed_script(env, name, args, extra, code, says):
    ran = script(args, {**env, **extra})
    _one_clear_line(ran.code, ran.stderr, code, says)


def test_aws_provider_without_aws_credentials_or_with_an_unreachable_endpoint(env, listener, entry_point):
    env = {"DCM_PROJECT": "p", "PUBSUB_EMULATOR_HOST": listener}
    no_credentials = entry_point(["provider", "run-aws", "--once"], env)
    _one_clear_line(no_credentials.code, no_credentials.stderr, 1, "no AWS credentials")
    unreachable = entry_point(["provider", "run-aws", "--once", "--endpoint-url", f"http://{DEAD}"],
                              {**env, "AWS_ACCESS_KEY_ID": "x", "AWS_SECRET_ACCESS_KEY": "y"})
    _one_clear_line(unreachable.code, unreachable.stderr, 1, "cannot reach the AWS endpoint")


def test_kubernetes_provider_with_its_api_server_down(listener, entry_point):
    down = entry_point(["provider", "run-kubernetes", "--api-url", f"http://{DEAD}", "--once"],
                       {"DCM_PROJECT": "p", "PUBSUB_EMULATOR_HOST": listener})
    _one_clear_line(down.code, down.stderr, 1, "cannot connect")


def test_help_version_and_the_types_publish_accepts(env, entry_point):
    """The installed script's help (80 columns); the other ways to ask, and the version, through its entry point."""
    ran = {tuple(args): script(args, env) for args in (["--help"], ["publish", "-h"])}
    ran.update({tuple(args): entry_point(args) for args in (["-h"], ["--version"], ["dlq", "show", "-h"])})
    for args, result in ran.items():
        assert result.code == 0 and result.stdout and not result.stderr, args
    publish = ran[("publish", "-h")].stdout
    assert "vm: PROVISIONING, RUNNING" in publish and "Example: dcm-status publish" in publish
    assert "0.1.0" in ran[("--version",)].stdout


def test_every_command_has_help_with_an_example_and_every_option_a_help_text():
    import click

    def walk(group, path):  # through list_commands/get_command: the commands loaded when run too
        ctx = click.Context(group)
        for name in group.list_commands(ctx):
            command = group.get_command(ctx, name)
            if isinstance(command, click.Group):
                yield from walk(command, [*path, name])
            else:
                yield [*path, name], command
    commands = list(walk(cli, []))
    assert len(commands) >= 20
    assert [" ".join(p) for p, c in commands if "Example:" not in (c.help or "")] == []
    assert [(" ".join(p), o.opts[0]) for p, c in commands for o in c.params
            if isinstance(o, click.Option) and not o.help] == []


def test_a_bug_is_one_line_too_and_debug_shows_the_traceback(env, monkeypatch):
    import importlib

    cli_main = importlib.import_module("infra.cli.main")

    def broken(*_args, **_kwargs):
        raise ZeroDivisionError("division by zero")
    monkeypatch.setattr("shared.api.queries.stats", broken)
    monkeypatch.setattr(cli_main, "connect", lambda: type("C", (), {"firestore": lambda self: None})())
    result = CliRunner().invoke(cli, ["stats"], env=_runner_env(env))
    _one_clear_line(result.exit_code, result.stderr, 1, "unexpected ZeroDivisionError: division by zero")
    debug = CliRunner().invoke(cli, ["stats"], env=_runner_env({**env, "DCM_DEBUG": "1"}))
    assert isinstance(debug.exception, ZeroDivisionError)


def _runner_env(env: dict[str, str]) -> dict[str, str | None]:
    """click's runner adds to os.environ: unset what the test's environment leaves out."""
    return {**{k: None for k in os.environ if k not in env}, **env}


def _one_clear_line(code: int, stderr: str, want_code: int, says: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert code == want_code, stderr
    assert "Traceback" not in stderr
    assert says in stderr, stderr
    errors = [line for line in lines if line.startswith("Error")]
    assert len(errors) == 1, stderr


def test_a_hung_firestore_is_an_error_in_bounded_time_not_a_hang(env, listener, monkeypatch):
    """Something accepts connections on the emulator port and never answers: every read is bounded by
    the operator tools' timeout (shortened here to 1 s)."""
    from shared.runtime import firestore as fs

    monkeypatch.setattr(fs, "READ_TIMEOUT", 1.0)
    hung = {**env, "DCM_PROJECT": "p", "FIRESTORE_EMULATOR_HOST": listener}
    for args in (["get", "aws/vm/i-1"], ["list"], ["dlq", "show", "0123abcd"]):
        result = CliRunner().invoke(cli, args, env=_runner_env(hung))
        _one_clear_line(result.exit_code, result.stderr, 1, "did not answer in time")


@pytest.mark.parametrize("stopped, says", [
    (True, "local stack stopped; its emulator data (resources, dead letters, undelivered messages) is gone"),
    (False, "local stack was not running")])
def test_down_says_what_goes_with_the_stack(env, monkeypatch, stopped, says):
    """`down` says the emulators keep nothing (their data goes with them) when it stopped a stack; the
    real stop is the e2e session's teardown."""
    from infra.local.stack import LocalStack

    monkeypatch.setattr(LocalStack, "down", lambda self: stopped)
    result = CliRunner().invoke(cli, ["down"], env=env)
    assert result.exit_code == 0 and result.stderr.strip() == says


# ---- moved from tests/e2e/test_cli.py (issue 41): on the in-process pipeline (tests/pipeline.py), no stack ----
def test_bad_input_gets_a_clear_error(pipeline):
    bad_key = pipeline.cli("get", "not-a-key")
    assert bad_key.exit_code == 2 and "PROVIDER/TYPE/ID" in bad_key.stderr
    bad_provider = pipeline.cli("provider", "add", "Bad_Name")
    assert bad_provider.exit_code == 2 and "lowercase" in bad_provider.stderr


PUBLISH_MISTAKES = [
    # (what, publish arguments, what stderr says); "provider not added" (the stack's providers): tests/e2e
    ("unknown type", ["--provider", "aws", "--type", "queue", "--status", "RUNNING"],
     "ingest would reject this event (unknown_resource_type)"),
    ("not a time", ["--provider", "aws", "--type", "vm", "--status", "RUNNING", "--time", "yesterday"],
     "ingest would reject this event"),
    ("empty id", ["--provider", "aws", "--type", "vm", "--status", "RUNNING", "--id", ""],
     "ingest would reject this event"),
]


@pytest.mark.parametrize("what, args, says", PUBLISH_MISTAKES, ids=[m[0] for m in PUBLISH_MISTAKES])
def test_publish_refuses_what_the_pipeline_would_reject(pipeline, what, args, says):
    result = pipeline.cli("publish", *(args if "--id" in args else ["--id", "refused-fn", *args]))
    assert result.exit_code == 1 and says in result.stderr and "Traceback" not in result.stderr
    assert len([line for line in result.stderr.splitlines() if line.strip()]) == 1
    assert not pipeline.bus.messages  # nothing published


def test_publishs_check_gives_the_platforms_log_level_back(pipeline):
    """The check as ingest silences ingest's log lines while it runs, then gives the level back: run in the
    process of the functions (a test's, a notebook's), it left every later log line and traced attribute out."""
    logging.getLogger("dcm").setLevel(logging.INFO)
    assert pipeline.cli("publish", "--provider", "aws", "--type", "vm", "--id", "lvl-1",
                        "--status", "RUNNING").exit_code == 0
    assert pipeline.cli("publish", "--provider", "aws", "--type", "queue", "--id", "lvl-2",
                        "--status", "RUNNING").exit_code == 1
    assert logging.getLogger("dcm").level == logging.INFO


def test_filters_are_case_insensitive_and_tables_fit_80_columns(pipeline):
    rid = "a-very-long-resource-id-that-would-not-fit-in-eighty-columns-fn"
    sent = pipeline.cli("publish", "--provider", "aws", "--type", "vm", "--id", rid, "--status", "stopped",
                        "--message", "a long message " * 8)
    assert sent.exit_code == 0, sent.stderr
    pipeline.settle()
    assert pipeline.resource(f"aws/vm/{rid}")["status"] == "STOPPED"
    narrow = pipeline.cli("list", "--provider", "AWS", "--type", "VM", "--status", "stopped")  # COLUMNS=80
    lines = narrow.stdout.splitlines()
    assert lines[0].split() == ["KEY", "STATUS", "SINCE", "MESSAGE"]
    assert any(f"aws/vm/{rid[:10]}" in line and "…" in line for line in lines)
    assert all(len(line) <= 80 for line in lines)
    wide = pipeline.cli("list", "--provider", "aws", "--status", "Stopped", "--wide")
    assert any(f"aws/vm/{rid}" in line for line in wide.stdout.splitlines())


def test_get_unknown_resource_exits_1(pipeline):
    result = pipeline.cli("get", "aws/vm/nothing-fn", "--json")
    assert result.exit_code == 1 and "unknown resource" in result.stderr


def test_an_unknown_status_is_published_with_a_warning(pipeline):
    result = pipeline.cli("publish", "--provider", "aws", "--type", "vm", "--id", "sleepy-fn", "--status", "sleeping")
    assert result.exit_code == 0, result.stderr
    assert result.stdout.strip()  # only the message id on stdout
    assert len(result.stdout.splitlines()) == 1
    assert "warning: 'sleeping' is not a vm status; it will be stored as UNKNOWN" in result.stderr
    pipeline.settle()
    assert pipeline.resource("aws/vm/sleepy-fn")["status"] == "UNKNOWN"
    assert pipeline.resource("aws/vm/sleepy-fn")["rawStatus"] == "sleeping"


def test_no_validate_sends_a_rejected_event_to_the_dead_letters_and_dlq_takes_short_ids(pipeline):
    from shared.deadletter.store import DeadLetterStore

    sent = pipeline.cli("publish", "--provider", "aws", "--type", "queue", "--id", "q-fn", "--status",
                        "RUNNING", "--no-validate")
    assert sent.exit_code == 0 and sent.stdout.strip()  # the message id
    pipeline.settle()
    [entry] = [e for e in DeadLetterStore(pipeline.db).query(reason="unknown_resource_type")
               if e.get("key") == "aws/queue/q-fn"]
    # the short id `dlq list --flat` prints is enough to show it
    shown = pipeline.cli("dlq", "show", entry["id"][:12])
    assert shown.exit_code == 0 and entry["id"] in shown.stdout and "unknown_resource_type" in shown.stdout
    assert "{'" not in shown.stdout  # values, not Python reprs
    missing = pipeline.cli("dlq", "replay", "f" * 32)
    assert missing.exit_code == 1 and "no dead-letter entry" in missing.stderr
