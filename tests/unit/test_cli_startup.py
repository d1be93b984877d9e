"""``dcm-status`` starts with what the command run uses: a test run starts it hundreds of times, and each
library loaded for another command's sake cost every start (1.3 s of CPU for any command, before)."""

from __future__ import annotations

import json
import subprocess
import sys

import click

from infra.cli import cli
from infra.cli.main import SUBCOMMANDS

# What only some commands use: billing's reports and rich's tables, callbacks' cipher, the dead letters'
# replay, Pub/Sub's client (publish, up), Firestore's (reads), the schemas' full validator (rejections).
NOT_AT_START = ("infra.cli.billing", "infra.cli.callbacks", "infra.cli.dlq", "infra.cli.live", "infra.cli.trace",
                "rich", "cryptography", "google.cloud.pubsub_v1", "google.cloud.firestore", "jsonschema",
                "shared.api.queries")


def loaded_after(code: str) -> set[str]:
    probe = f"import sys, json\n{code}\nprint(json.dumps(sorted(sys.modules)))"
    out = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=True)
    return set(json.loads(out.stdout))


def test_the_command_line_loads_no_commands_libraries_until_one_runs():
    loaded = loaded_after("import infra.cli.main")
    assert [m for m in NOT_AT_START if m in loaded] == []


def test_a_command_in_a_module_of_its_own_is_loaded_when_it_runs():
    loaded = loaded_after("from infra.cli import cli\n"
                          "from click.testing import CliRunner\n"
                          "CliRunner().invoke(cli, ['dlq', '--help'], catch_exceptions=False)")
    assert "infra.cli.dlq" in loaded and "infra.cli.billing" not in loaded


def test_every_lazy_command_is_listed_and_resolves_to_the_command_it_names():
    ctx = click.Context(cli)
    assert set(SUBCOMMANDS) <= set(cli.list_commands(ctx))
    for name in SUBCOMMANDS:
        command = cli.get_command(ctx, name)
        assert isinstance(command, click.Command) and command.name == name
    assert cli.get_command(ctx, "no-such-command") is None
