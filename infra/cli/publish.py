"""``dcm-status publish``: one status report, checked as ingest checks it, on a provider's ingress topic or
its NATS subjects."""

from __future__ import annotations

import json
import logging
from typing import Any

import click
from dcm_status_contracts.pubsub_binding import BindingMode
from google.api_core import exceptions as gexc

from infra.cli.common import check_provider_name, connect
from infra.cli.natspublish import Via, subject_of
from infra.cli.natspublish import publish as nats_publish
from infra.local.stack import LocalStack


def _types_and_statuses() -> str:
    from dcm_status_contracts.schemas import registry

    reg = registry()
    return "\n".join(f"  {t}: {', '.join(reg.current[t].statuses)}" for t in reg.resource_types)


class _ListsTypes(click.Command):
    """`publish --help` ends with the resource types and their statuses, read from the schemas when the
    help is shown (not on every start of the CLI)."""

    def format_epilog(self, ctx: click.Context, formatter: click.HelpFormatter) -> None:
        self.epilog = "\b\nResource types and their statuses (case-insensitive):\n" + _types_and_statuses()
        super().format_epilog(ctx, formatter)


def _json_map(ctx: click.Context, param: click.Parameter, value: str | None) -> dict[str, Any] | None:
    """A JSON object given on the command line, or a one-line usage error."""
    if value is None:
        return None
    try:
        parsed = json.loads(value)
    except ValueError as exc:
        raise click.BadParameter(f"not JSON: {exc}") from exc
    if not isinstance(parsed, dict):
        raise click.BadParameter("expected a JSON object ({...})")
    return parsed


@click.command(cls=_ListsTypes)
@click.option("--provider", "provider_name", required=True, help="The provider publishing (e.g. aws).")
@click.option("--type", "resource_type", required=True, help="Resource type (listed below).")
@click.option("--id", "resource_id", required=True, help="The resource's id at its provider.")
@click.option("--status", required=True, help="Status (listed below per type).")
@click.option("--message", default="", help="Human-readable detail.")
@click.option("--time", "event_time", default=None, help="RFC 3339 event time (default: now).")
@click.option("--event-id", default=None, help="CloudEvent id (default: a new UUID).")
@click.option("--mode", type=click.Choice([m.value for m in BindingMode]), default=BindingMode.STRUCTURED.value,
              show_default=True, help="CloudEvents binding: the JSON event as data, or ce-* attributes.")
@click.option("--no-validate", is_flag=True, help="Publish even what ingest will reject (to test dead letters).")
@click.option("--via", type=click.Choice([v.value for v in Via]), default=Via.PUBSUB.value, show_default=True,
              help="pubsub: on the provider's ingress topic; nats: on NATS as the provider's identity, on "
                   "subject dcm.TYPE in the upstream providers' form (local stack).")
@click.option("--output-spec", "output_spec", callback=_json_map, default=None, metavar="JSON",
              help='What the resource offers others, as the DCM control-plane reads it: a JSON object '
                   '(e.g. \'{"host": "10.0.1.5", "port": 5432}\'); replaces the stored one whole, {} clears it.')
@click.option("--outputs", callback=_json_map, default=None, metavar="JSON",
              help="The same under the cross-provider-outputs proposal's name, data.outputs.")
def publish(provider_name: str, resource_type: str, resource_id: str, status: str, message: str,
            event_time: str | None, event_id: str | None, mode: str, no_validate: bool, via: str,
            output_spec: dict[str, Any] | None, outputs: dict[str, Any] | None) -> None:
    """Publish one status CloudEvent as a provider would; prints the message id (with --via nats: the
    stream sequence NATS stored it under).

    Checked first with ingest's own rules: an event the pipeline would reject is refused with the
    reason (exit 1) unless --no-validate.

    Example: dcm-status publish --provider aws --type vm --id i-0abc --status running
    Example: dcm-status publish --via nats --provider osac --type vm --id vm-1 --status running
    """
    from dcm_status_contracts.pubsub_binding import to_message
    from dcm_status_contracts.status_report import ReportForm, build_event

    check_provider_name(provider_name, "--provider")
    conn = connect()
    if conn.local and provider_name not in conn.topology.providers:
        raise click.ClickException(f"provider {provider_name} not added; run 'dcm-status provider add "
                                   f"{provider_name}'")
    publisher = conn.publisher()
    topic = conn.topology.ingress_template.replace("{provider}", provider_name)
    topic_path = publisher.topic_path(conn.project, topic)
    form = ReportForm.CURRENT if via == Via.NATS else ReportForm.JANUARY  # NATS: as the upstream providers send it
    event = build_event(provider_name, resource_type, resource_id, status, message, event_id=event_id,
                        time=event_time, last_transition_time=event_time, form=form, output_spec=output_spec,
                        outputs=outputs)
    data, attrs = to_message(event, BindingMode(mode))  # published as is: checked first unless --no-validate
    if not no_validate:
        _check_as_ingest(data, attrs, topic, resource_type, status)
    if via == Via.NATS:
        _publish_via_nats(provider_name, subject_of(resource_type), data, attrs, BindingMode(mode))
        return
    try:
        click.echo(publisher.publish(topic_path, data, **attrs).result(timeout=30))
    except gexc.NotFound as exc:
        raise click.ClickException(f"provider {provider_name} not added (no topic {topic_path}); "
                                   f"run 'dcm-status provider add {provider_name}'") from exc


def _check_as_ingest(data: bytes, attrs: dict[str, str], topic: str, resource_type: str, status: str) -> None:
    """Ingest's own checks of the message on ``topic``: a usage error with its reason if it would reject it; a
    warning if the status would be stored as UNKNOWN."""
    from dcm_status_contracts.errors import Rejected
    from dcm_status_contracts.model import CommonStatus, PubSubMessage
    from dcm_status_contracts.schemas import status_token

    from shared.ingest.normalize import normalize_message
    from shared.runtime import settings as settings_module

    dcm_logs = logging.getLogger("dcm")
    level = dcm_logs.level
    dcm_logs.setLevel(logging.CRITICAL + 1)  # ingest's log lines are for Cloud Logging; the level given back after
    try:
        update = normalize_message(PubSubMessage(data, attrs, "local-check", topic=topic), settings_module.from_env())
    except Rejected as exc:
        raise click.ClickException(f"ingest would reject this event ({exc.reason.value}): {exc.message}; "
                                   "--no-validate sends it anyway") from exc
    finally:
        dcm_logs.setLevel(level)
    if update.status == CommonStatus.UNKNOWN and status_token(status) != CommonStatus.UNKNOWN:
        click.echo(f"warning: {status!r} is not a {resource_type} status; it will be stored as UNKNOWN "
                   "(the reported value kept as rawStatus)", err=True)


def _publish_via_nats(provider_name: str, subject: str, data: bytes, attrs: dict[str, str],
                      mode: BindingMode) -> None:
    """As the upstream providers do: the JSON event as the payload (no header), or ce-* headers (binary)."""
    import nats.errors

    stack = LocalStack()
    state = stack.running()
    if state is None or not state.nats:
        raise click.ClickException("--via nats publishes to the local stack's NATS: dcm-status up")
    identity = stack.nats_credentials(state, provider_name)
    if identity is None:
        raise click.ClickException(f"provider {provider_name} has no NATS identity; run 'dcm-status provider add "
                                   f"{provider_name}'")
    headers = attrs if mode is BindingMode.BINARY else {}
    try:
        click.echo(nats_publish(state.nats_url, identity, subject, data, headers))
    except (nats.errors.Error, OSError, TimeoutError) as exc:
        raise click.ClickException(f"NATS refused or did not ack the publish on {subject}: {exc!r}") from exc
