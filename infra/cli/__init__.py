"""``dcm-status``: the command line (``main``), one module per command group."""

from infra.cli.main import cli, main

__all__ = ["cli", "main"]
