"""Every failure of a ``dcm-status`` command ends as one line on stderr and a non-zero exit.

Mistakes of usage exit 2 (click's ``UsageError``/``BadParameter``); anything else that stops a command
exits 1 with a sentence saying what to do. A traceback is printed only with ``DCM_DEBUG=1``.
"""

from __future__ import annotations

import concurrent.futures
import os

import click


def explain(exc: BaseException) -> str:
    """One line for an exception a command did not handle itself."""
    from google.api_core import exceptions as gexc
    from google.auth import exceptions as auth_exc

    if isinstance(exc, auth_exc.DefaultCredentialsError):
        return ("no Google Cloud credentials: run 'gcloud auth application-default login' for project "
                f"{os.environ.get('DCM_PROJECT', '?')}, or unset DCM_PROJECT and run 'dcm-status up'")
    if isinstance(exc, auth_exc.GoogleAuthError):
        return f"Google Cloud authentication failed: {_first_line(exc)}"
    if isinstance(exc, gexc.PermissionDenied):
        return f"permission denied: {_first_line(exc.message)}"
    if isinstance(exc, gexc.NotFound):
        return f"not found: {_first_line(exc.message)}"
    if isinstance(exc, (gexc.ServiceUnavailable, gexc.DeadlineExceeded, gexc.RetryError)):
        return f"Google Cloud did not answer in time ({type(exc).__name__}): {_first_line(exc)}"
    if isinstance(exc, gexc.GoogleAPICallError):
        return f"{type(exc).__name__}: {_first_line(exc.message)}"
    if isinstance(exc, (concurrent.futures.TimeoutError, TimeoutError)):
        return "timed out waiting for an answer: is the stack up (dcm-status status)?"
    try:
        from botocore import exceptions as boto_exc
    except ImportError:  # the aws extra is not installed
        boto_exc = None
    if boto_exc is not None:
        if isinstance(exc, boto_exc.NoCredentialsError):
            return ("no AWS credentials: set AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), "
                    "or point --endpoint-url at an EC2-compatible endpoint such as a moto server")
        if isinstance(exc, boto_exc.EndpointConnectionError):
            return f"cannot reach the AWS endpoint: {_first_line(exc)}"
        if isinstance(exc, boto_exc.ClientError):
            return f"AWS refused: {_first_line(exc)}"
        if isinstance(exc, boto_exc.BotoCoreError):
            return f"AWS: {_first_line(exc)}"
    return (f"unexpected {type(exc).__name__}: {_first_line(exc)} (a bug: please report it with the output "
            "of the same command run with DCM_DEBUG=1)")


def _first_line(value: object) -> str:
    text = str(value).strip()
    return text.splitlines()[0][:300] if text else "(no detail)"


class Group(click.Group):
    """A click group whose commands never end in a traceback."""

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
