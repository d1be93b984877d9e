"""Every failure of a ``dcm-status`` command ends as one line on stderr and a non-zero exit.

Mistakes of usage exit 2 (click's ``UsageError``/``BadParameter``); anything else that stops a command
exits 1 with a sentence saying what to do. A traceback is printed only with ``DCM_DEBUG=1``.
"""

from __future__ import annotations

import concurrent.futures
import importlib
import os
from typing import Callable, Mapping

import click


def _explanations() -> list[tuple[type[BaseException], Callable[[BaseException], str]]]:
    """(exception class, its one line), most specific first."""
    import requests
    from dcm_status_contracts.errors import ConfigError, InvalidRequest, Transient
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    table: list[tuple[type[BaseException], Callable[[BaseException], str]]] = [
        (InvalidRequest, lambda e: e.detail),  # type: ignore[attr-defined]
        (ConfigError, lambda e: _first_line(e)),  # a misconfiguration says what to change (infra/topology.yaml...)
        (Transient, lambda e: f"Firestore did not answer: {_first_line(e)}"),
        (auth_exc.DefaultCredentialsError, lambda e: (
            "no Google Cloud credentials: run 'gcloud auth application-default login' for project "
            f"{os.environ.get('DCM_PROJECT', '?')}, or unset DCM_PROJECT and run 'dcm-status up'")),
        (auth_exc.GoogleAuthError, lambda e: f"Google Cloud authentication failed: {_first_line(e)}"),
        (gexc.PermissionDenied, lambda e: f"permission denied: {_first_line(e.message)}"),
        (gexc.NotFound, lambda e: f"not found: {_first_line(e.message)}"),
        *((kind, lambda e: f"Google Cloud did not answer in time ({type(e).__name__}): {_first_line(e)}")
          for kind in (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError)),
        (gexc.GoogleAPICallError, lambda e: f"{type(e).__name__}: {_first_line(e.message)}"),
        (concurrent.futures.TimeoutError, lambda e: "timed out waiting for an answer: is the stack up "
                                                    "(dcm-status status)?"),
        (requests.exceptions.SSLError, lambda e: f"TLS: {_first_line(e)} (--ca-file the cluster's CA?)"),
        (requests.exceptions.ConnectionError, lambda e: f"cannot connect: {_first_line(e)}"),
        (requests.exceptions.HTTPError, lambda e: f"the server refused: {_first_line(e)}"),
        (requests.exceptions.RequestException, lambda e: f"HTTP: {_first_line(e)}"),
    ]
    try:
        from botocore import exceptions as boto_exc
    except ImportError:  # the aws extra is not installed
        return table
    return table + [
        (boto_exc.NoCredentialsError, lambda e: (
            "no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or point "
            "--endpoint-url at an EC2-compatible endpoint such as a moto server")),
        (boto_exc.EndpointConnectionError, lambda e: f"cannot reach the AWS endpoint: {_first_line(e)}"),
        (boto_exc.ClientError, lambda e: f"AWS refused: {_first_line(e)}"),
        (boto_exc.BotoCoreError, lambda e: f"AWS: {_first_line(e)}"),
    ]


def explain(exc: BaseException) -> str:
    """One line for an exception a command did not handle itself."""
    for kind, say in _explanations():
        if isinstance(exc, kind):
            return say(exc)
    return (f"unexpected {type(exc).__name__}: {_first_line(exc)} (a bug: please report it with the output "
            "of the same command run with DCM_DEBUG=1)")


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0][:300] if text else "(no detail)"


class Group(click.Group):
    """A click group whose commands never end in a traceback. ``lazy``: subcommands named by where they are
    defined ("module:attribute"), imported only when run or listed (Click's documented lazy loading): each
    command then loads what it uses, not what every other command does."""

    def __init__(self, *args, lazy: Mapping[str, str] | None = None, **kwargs):
        super().__init__(*args, **kwargs)
        self.lazy = dict(lazy or {})

    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted({*super().list_commands(ctx), *self.lazy})

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name in self.lazy and name not in self.commands:
            module, attribute = self.lazy[name].split(":")
            self.add_command(getattr(importlib.import_module(module), attribute), name)
        return super().get_command(ctx, name)

    def invoke(self, ctx: click.Context):
        try:
            return super().invoke(ctx)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort, SystemExit):
            raise
        except KeyboardInterrupt:
            raise click.exceptions.Abort() from None
        except Exception as exc:  # noqa: BLE001 - the one place every command's failure is explained
            if os.environ.get("DCM_DEBUG"):
                raise
            raise click.ClickException(explain(exc)) from exc
