"""What every ``dcm-status`` command shares: the connection and time arguments (output: infra/console.py)."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from datetime import date, datetime, timedelta

import click
from dcm_status_contracts import timeutil
from dcm_status_contracts.identity import provider_name_problem

from infra.local import emulators
from infra.local.stack import LocalStack
from infra.topology import Topology, load
from shared.state.usage.intervals import day_start

_DURATION = re.compile(r"^(\d+)([smhd])$")
_UNITS = {"s": "seconds", "m": "minutes", "h": "hours", "d": "days"}
_DATE = re.compile(r"^\d{4}-\d{2}-\d{2}$")
TIME_FORMS = "use YYYY-MM-DD, an RFC 3339 time, 'now', or a duration ago (30m, 2h, 7d)"


@dataclass
class Connection:
    project: str
    topology: Topology
    local: bool

    def firestore(self):
        from google.cloud import firestore
        return firestore.Client(project=self.project)

    def publisher(self, ordering: bool = False):
        from google.cloud import pubsub_v1
        opts = pubsub_v1.types.PublisherOptions(enable_message_ordering=ordering)
        return pubsub_v1.PublisherClient(publisher_options=opts)


def connect() -> Connection:
    """Point the client libraries at the running local stack, or at DCM_PROJECT."""
    stack = LocalStack()
    state = stack.running()
    if state is not None:
        unwell = stack.unwell_functions(state)
        if unwell:
            click.echo(f"warning: {'; '.join(f'{h.component} {h.status}' for h in unwell)} "
                       "(dcm-status status; dcm-status up restarts what is down)", err=True)
        os.environ.update(stack.client_env(state))
        return Connection(state.project, stack.topology(state), True)
    for variable in ("PUBSUB_EMULATOR_HOST", "FIRESTORE_EMULATOR_HOST"):
        host = os.environ.get(variable)
        if host and not emulators.reachable(host):
            raise click.ClickException(f"{variable}={host} does not answer (left from 'dcm-status env' after "
                                       f"'down'?): run 'dcm-status up', or unset {variable}")
    project = os.environ.get("DCM_PROJECT")
    if not project:
        raise click.ClickException("the local stack is not running (dcm-status up) and DCM_PROJECT is not set")
    return Connection(project, load(), False)


def parse_time(value: str, now: datetime, param: str) -> datetime:
    """'now', a UTC date (its midnight), an RFC 3339 time, or a duration ago (90m, 2h, 7d)."""
    if value == "now":
        return now
    if _DATE.match(value):
        try:
            return day_start(date.fromisoformat(value))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint=param) from exc
    m = _DURATION.match(value)
    if m:
        try:
            return now - timedelta(**{_UNITS[m.group(2)]: int(m.group(1))})
        except OverflowError as exc:
            raise click.BadParameter(f"{value} reaches before the year 1", param_hint=param) from exc
    try:
        return timeutil.parse(value)
    except ValueError as exc:
        raise click.BadParameter(TIME_FORMS, param_hint=param) from exc


def check_provider_name(name: str, hint: str) -> None:
    """A name no provider may have (the rule, or a name the platform's NATS users hold): a usage error."""
    problem = provider_name_problem(name)
    if problem:
        raise click.BadParameter(problem, param_hint=hint)
