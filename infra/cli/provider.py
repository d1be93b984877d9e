"""``dcm-status provider``: add a provider to the local stack, print its NATS identity, run a reference provider."""

from __future__ import annotations

import contextlib
from typing import Iterator

import click

from infra.cli.common import check_provider_name, connect
from infra.cli.errors import Group
from infra.console import JSON, emit_json, fields
from infra.local.stack import LocalStack


@click.group(cls=Group)
def provider() -> None:
    """Manage providers (one ingress topic and push subscription each)."""


@provider.command("add")
@click.argument("name")
def provider_add(name: str) -> None:
    """Add a provider to the running local stack (its ingress topic and subscription).

    Example: dcm-status provider add openstack
    """
    check_provider_name(name, "NAME")
    try:
        state = LocalStack().add_provider(name)
    except RuntimeError as exc:
        raise click.ClickException(str(exc)) from exc
    click.echo(f"provider {name} added; providers: {', '.join(state.providers)}", err=True)
    if state.nats:
        click.echo(f"its NATS identity: dcm-status provider nats-credentials {name} --json", err=True)


@provider.command("nats-credentials")
@click.argument("name")
@JSON
def provider_nats_credentials(name: str, as_json: bool) -> None:
    """Print the NATS URL, user and password provider NAME connects with (the local stack's).

    An unchanged dcm-project provider is pointed at it with NATS_URL=nats://USER:PASSWORD@HOST:PORT and
    publishes on its usual subjects (dcm.vm, dcm.cluster, ...); the server files them under
    providers.NAME. The password is a secret: this prints it, so mind where the output goes.

    Example: dcm-status provider nats-credentials osac --json
    """
    stack = LocalStack()
    state = stack.running()
    if state is None:
        raise click.ClickException("the local stack is not running: dcm-status up")
    if not state.nats:
        raise click.ClickException("this local stack runs no NATS (infra/topology.yaml declares no nats: section)")
    identity = stack.nats_credentials(state, name)
    if identity is None:
        raise click.ClickException(f"provider {name} not added; run 'dcm-status provider add {name}'")
    value = {"url": state.nats_url, "user": identity.user, "password": identity.password}
    if as_json:
        emit_json(value)
    else:
        fields(value.items())
        click.echo(f"NATS_URL={identity.url(state.nats_url)}")


@contextlib.contextmanager
def _one_line(*kinds: type[Exception]) -> Iterator[None]:
    """These errors, whose message says what to do, end the command as that one line (exit 1)."""
    try:
        yield
    except kinds as exc:
        raise click.ClickException(str(exc)) from exc


@provider.command("run-aws")
@click.option("--region", default="us-east-1", show_default=True, help="The AWS region to poll.")
@click.option("--endpoint-url", default=None, help="An EC2-compatible endpoint (e.g. a moto server).")
@click.option("--name", "provider_name", default="aws", show_default=True, help="The DCM provider name.")
@click.option("--interval", default=15.0, show_default=True, type=click.FloatRange(min=1),
              help="Seconds between polls.")
@click.option("--once", is_flag=True, help="Poll once and exit.")
def provider_run_aws(region: str, endpoint_url: str | None, provider_name: str, interval: float, once: bool) -> None:
    """The AWS reference provider, on the provider kit: report EC2 instance states as DCM vm status.

    Credentials are boto3's (environment, profile, instance role). Against moto, any will do:

    Example: AWS_ACCESS_KEY_ID=testing AWS_SECRET_ACCESS_KEY=testing dcm-status provider run-aws --endpoint-url http://127.0.0.1:5000 --once
    """
    import threading
    from urllib.parse import urlparse

    import boto3
    from botocore.config import Config
    from dcm_status_sdk import FlushTimeout, PublishRefused, Reporter, ReporterConfig

    from infra.providers.aws_ec2 import Ec2Bridge

    if endpoint_url and (urlparse(endpoint_url).scheme not in ("http", "https") or not urlparse(endpoint_url).netloc):
        raise click.BadParameter(f"{endpoint_url!r} is not an http(s) URL", param_hint="--endpoint-url")
    check_provider_name(provider_name, "--name")
    conn = connect()
    # bounded: an unreachable endpoint is an error in seconds, not minutes of retries
    config = Config(connect_timeout=5, read_timeout=15, retries={"max_attempts": 2, "mode": "standard"})
    refused = threading.Event()  # Pub/Sub refused reports for good: stop polling, close says why
    with _one_line(PublishRefused):  # no topic, no permission, no credentials: what to do, exit 1
        reporter = Reporter(ReporterConfig(project=conn.project, provider=provider_name,
                                           topic=conn.topology.ingress_template),
                            on_refused=lambda _: refused.set())
        bridge = Ec2Bridge(boto3.client("ec2", region_name=region, endpoint_url=endpoint_url, config=config),
                           reporter, region)
        try:
            while True:
                for o in bridge.poll_once():
                    click.echo(f"{o.instance_id} {o.state} -> {o.status.status} at {o.transition_time}", err=True)
                if once or refused.wait(interval):
                    break
        finally:  # an AWS error (no credentials, endpoint down) is one line too: infra/cli/errors.py
            try:
                reporter.close(timeout=30)
            except FlushTimeout as exc:
                raise click.ClickException(f"{exc} (Pub/Sub: {reporter.stats().last_error})") from exc


@provider.command("run-kubernetes")
@click.option("--api-url", required=True, help="The Kubernetes API server, e.g. https://api.cluster.example:6443.")
@click.option("--kind", "kind_name", type=click.Choice(["pods", "vmis"]), default="pods", show_default=True,
              help="pods (container status) or KubeVirt vmis (vm status).")
@click.option("--token-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="A bearer token (in a pod: /var/run/secrets/kubernetes.io/serviceaccount/token).")
@click.option("--ca-file", type=click.Path(exists=True, dir_okay=False), default=None,
              help="The cluster's CA certificate (default: the system's).")
@click.option("--name", "provider_name", default="kubernetes", show_default=True, help="The DCM provider name.")
@click.option("--once", is_flag=True, help="List once (a resync) and exit.")
def provider_run_kubernetes(api_url: str, kind_name: str, token_file: str | None, ca_file: str | None,
                            provider_name: str, once: bool) -> None:
    """The Kubernetes reference provider, on the provider kit: pod or KubeVirt VMI states from list and watch.

    Example: dcm-status provider run-kubernetes --api-url https://api.example:6443 --token-file token --kind pods
    """
    from urllib.parse import urlparse

    from dcm_status_sdk import PublishRefused, Reporter, ReporterConfig

    from infra.providers.kubernetes import KINDS, ApiServer, KubernetesBridge, run

    if urlparse(api_url).scheme not in ("http", "https") or not urlparse(api_url).netloc:
        raise click.BadParameter(f"{api_url!r} is not an http(s) URL", param_hint="--api-url")
    check_provider_name(provider_name, "--name")
    conn = connect()
    token = open(token_file).read().strip() if token_file else None
    with _one_line(PublishRefused), Reporter(ReporterConfig(project=conn.project, provider=provider_name,
                                                            topic=conn.topology.ingress_template)) as reporter:
        bridge = KubernetesBridge(reporter, KINDS[kind_name])
        run(bridge, ApiServer(api_url, token, ca_file or True), once=once,
            on_report=lambda status: click.echo(f"{status.raw} -> {status.status}", err=True))
        click.echo(f"{len(bridge.last)} {kind_name} known", err=True)
