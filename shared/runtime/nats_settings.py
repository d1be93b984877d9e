"""The NATS ingress's settings (functions/nats_ingress), read once from the environment: where NATS is, who
the ingress is there, the streams, subjects and durable consumers it reads (``nats:`` in
infra/topology.yaml, ``NatsSpec.env()``). The functions' own settings are ``shared/runtime/settings.py``'s.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Mapping

from dcm_status_contracts.errors import ConfigError

from shared.runtime.settings import integer, local_mode


@dataclass(frozen=True)
class NatsSettings:
    """The NATS ingress's settings (functions/nats_ingress): where NATS is, who the ingress is there, and the
    streams, subjects and durable consumers it reads (``nats:`` in infra/topology.yaml, NatsSpec.env()).

    A stream per provider (``stream`` and ``subject`` name ``{provider}``), each with the ingress's durable
    consumer: one provider's messages hold only its own ack-pending budget (``max_ack_pending``) and storage
    (``max_bytes``, ``max_msgs``, discard new), and JetStream's Nats-Msg-Id deduplication, which is per
    stream, never crosses providers (docs/nats.md)."""

    servers: tuple[str, ...]  # NATS_URL, comma-separated: a cluster's servers, each nats://, tls://, ws:// or wss://
    user: str | None
    password: str | None = field(default=None, repr=False)  # never in a log line
    creds: str | None = None  # a creds file (NATS_CREDS), instead of user and password
    stream: str = "dcm-status-{provider}"  # a stream per provider
    subject: str = "providers.{provider}.dcm.*"  # one token after dcm., as the control-plane reads status
    consumer: str = "dcm-status-ingress"  # the ingress's durable consumer on each provider's stream
    provider_prefix: str = "providers.{provider}."
    ack_wait_seconds: int = 10
    max_deliver: int = 5
    max_age_seconds: int = 604800
    health_port: int = 8080  # $PORT: /healthz answers there (Cloud Run's probe)
    # ... on every interface on Cloud Run (its probe and front end reach the container there), on loopback only
    # in local mode (DCM_LOCAL_MODE=1, the local stack): like every other local process, not on the machine's
    # network
    health_host: str = "0.0.0.0"
    batch: int = 64  # messages fetched at once
    publish_timeout_seconds: float = 5.0  # a Pub/Sub publish not confirmed by then is nak'ed (< ack_wait)
    max_ack_pending: int = 1000  # per provider: what one provider's unsettled messages may hold
    max_bytes: int = -1  # per provider's stream (-1: no limit); full: its publishes are refused (discard new)
    max_msgs: int = -1
    control_plane_stream: str = "dcm-status"  # every provider's stored events, republished for a control-plane
    control_plane_prefix: str = "dcm-status."  # ... under this prefix ("": no such stream)

    def stream_of(self, provider: str) -> str:
        return self.stream.replace("{provider}", provider)

    def subject_of(self, provider: str) -> str:
        return self.subject.replace("{provider}", provider)

    @property
    def control_plane_subject(self) -> str:
        """What the control-plane's stream captures: every provider's status subjects, republished."""
        return self.control_plane_prefix + self.subject.replace("{provider}", "*")

    def provider_of_subject(self, subject: str) -> str | None:
        """The provider the server-written prefix of ``subject`` names ("providers.osac.dcm.vm" -> "osac")."""
        head, _, tail = self.provider_prefix.partition("{provider}")
        if not subject.startswith(head):
            return None
        provider, dot, rest = subject[len(head):].partition(".")
        return provider if provider and dot and (tail in ("", ".") and rest) else None



NATS_SCHEMES = ("nats", "tls", "ws", "wss")
LOOPBACK, ALL_INTERFACES = "127.0.0.1", "0.0.0.0"


def _nats_servers(text: str) -> tuple[str, ...]:
    """NATS_URL: one server or a cluster's, comma-separated (Terraform's nats_url), each a URL nats-py connects
    to. nats-py takes "tls://a:4222,tls://b:4222" whole as one server and refuses it ("invalid connect url
    option"): the ingress would never connect, so it is split here, each part checked."""
    servers = tuple(part.strip() for part in text.split(","))
    shown = re.sub(r"://[^/@,]*@", "://[credentials]@", text)[:160]  # a refusal never prints a password
    for server in servers:
        scheme, sep, rest = server.partition("://")
        host = rest.rpartition("@")[2].split("/", 1)[0]
        port = host.rpartition(":")[2] if ":" in host.lstrip("[") else ""
        if not (sep and scheme in NATS_SCHEMES and host and not any(c.isspace() for c in server)
                and (port == "" or port.isdigit() and 0 < int(port) < 65536)):
            raise ConfigError(f"NATS_URL must be one or more comma-separated {', '.join(s + '://' for s in NATS_SCHEMES)} "
                              f"URLs (host[:port]), got {shown!r}")
    if len(set(servers)) != len(servers):
        raise ConfigError(f"NATS_URL names a server twice: {shown!r}")
    return servers


def nats_from_env(env: Mapping[str, str] | None = None) -> NatsSettings:
    """The NATS ingress's settings from the environment (NATS_URL, NATS_USER and NATS_PASSWORD or NATS_CREDS,
    NATS_STREAM_NAME, NATS_STATUS_SUBJECT, NATS_CONSUMER_NAME, ...)."""
    env = os.environ if env is None else env
    servers = _nats_servers(env.get("NATS_URL", ""))
    prefix = env.get("NATS_PROVIDER_PREFIX", "providers.{provider}.")
    if "{provider}" not in prefix:
        raise ConfigError(f"NATS_PROVIDER_PREFIX must contain '{{provider}}', got {prefix!r}")
    if env.get("NATS_CREDS") and env.get("NATS_PASSWORD"):
        raise ConfigError("set NATS_CREDS or NATS_USER and NATS_PASSWORD, not both")
    stream, subject = env.get("NATS_STREAM_NAME", "dcm-status-{provider}"), env.get("NATS_STATUS_SUBJECT",
                                                                                    "providers.{provider}.dcm.*")
    if env.get("NATS_CONTROL_PLANE_STREAM", "dcm-status") and not env.get("NATS_CONTROL_PLANE_PREFIX", "dcm-status."):
        raise ConfigError("NATS_CONTROL_PLANE_PREFIX must not be empty while NATS_CONTROL_PLANE_STREAM is set: the "
                          "providers' streams republish under it")
    if "{provider}" not in stream or "{provider}" not in subject:
        raise ConfigError(f"NATS_STREAM_NAME and NATS_STATUS_SUBJECT name a stream per provider: each must contain "
                          f"'{{provider}}', got {stream!r} and {subject!r}")
    ack_wait, publish_timeout = integer(env, "NATS_ACK_WAIT_SECONDS", 10), integer(env, "NATS_PUBLISH_TIMEOUT_SECONDS", 5)
    if publish_timeout >= ack_wait:  # JetStream would deliver it again while its publish may still complete
        raise ConfigError(f"NATS_PUBLISH_TIMEOUT_SECONDS ({publish_timeout}) must be shorter than the consumer's "
                          f"NATS_ACK_WAIT_SECONDS ({ack_wait})")
    return NatsSettings(
        servers=servers, user=env.get("NATS_USER") or None, password=env.get("NATS_PASSWORD") or None,
        creds=env.get("NATS_CREDS") or None,
        stream=stream,
        subject=subject,
        consumer=env.get("NATS_CONSUMER_NAME", "dcm-status-ingress"),
        provider_prefix=prefix,
        ack_wait_seconds=ack_wait,
        max_deliver=integer(env, "NATS_MAX_DELIVER", 5),
        max_age_seconds=integer(env, "NATS_MAX_AGE_SECONDS", 604800, minimum=0),
        health_port=integer(env, "PORT", 8080),
        health_host=LOOPBACK if local_mode(env) else ALL_INTERFACES,
        batch=integer(env, "NATS_BATCH", 64),
        publish_timeout_seconds=float(publish_timeout),
        max_ack_pending=integer(env, "NATS_MAX_ACK_PENDING", 1000),
        max_bytes=integer(env, "NATS_PROVIDER_MAX_BYTES", -1, minimum=-1),
        max_msgs=integer(env, "NATS_PROVIDER_MAX_MSGS", -1, minimum=-1),
        control_plane_stream=env.get("NATS_CONTROL_PLANE_STREAM", "dcm-status"),
        control_plane_prefix=env.get("NATS_CONTROL_PLANE_PREFIX", "dcm-status."),
    )
