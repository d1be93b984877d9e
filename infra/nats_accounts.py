"""The nats-server configuration of the NATS ingress, generated from the topology: one account per provider.

    python -m infra.nats_accounts --credentials FILE [--providers a,b] [--port 4222] > nats-server.conf

Each provider is an account of its own with one user, allowed to publish only ``provider_subjects``
(``dcm.>``) and to subscribe only to its ``_INBOX.>`` (where a JetStream publish's ack comes back). The
platform account exports one service per provider, ``providers.{provider}.dcm.>``, to that provider's
account alone, which imports it as ``dcm.>``: what osac publishes on ``dcm.vm`` reaches the platform as
``providers.osac.dcm.vm``, whether it published with core NATS (no ack) or JetStream (its ack routed back
through the import). Each provider's stream captures ``providers.{provider}.dcm.*`` (one token, as the
control-plane's status filter); the ingress reads the provider
from that server-written prefix. A provider that publishes anything else (``providers.aws.dcm.vm``, a
JetStream API subject) is refused by the server (a permissions violation), and its own account has no
JetStream and no other import: it can neither reach the platform account's subjects nor another's.

(A *stream* export from each provider account with a ``to`` prefix carries a core publish just as well,
but no JetStream ack: the kubevirt and osac providers publish with ``js.Publish`` and would time out and
retry forever. Measured with nats-server 2.15.1.)

The passwords are generated once (``secrets``, 192 bits) and kept in clear only in a JSON file of mode 0600;
the server's configuration (also 0600) holds their bcrypt hashes, which nats-server checks a password against.
Nothing here logs them. In production the same generator writes the configuration, and the passwords come
from the operator's secret store (docs/nats.md).

Every account has limits (``limits {}``): connections, subscriptions, and the largest message a user of it may
publish (``max_payload``, sized to the largest event ingest accepts): nats-server refuses a connection, a
subscription or a message beyond them, so one provider cannot take the server's connections or fill the stream
with messages the pipeline would refuse anyway.

The platform's own users: ``platform`` (the ingress) and, with ``--control-plane-user``, a DCM control-plane
that may only read and ack from its own durable consumers (``--control-plane-consumer STREAM:CONSUMER``): no
publish on ``providers.>``, no other JetStream API (it cannot create a consumer: a push consumer's deliver
subject could be ``providers.aws.dcm.vm``, re-captured by the stream as aws's). Their names are ones no provider
can take (``RESERVED_PROVIDER_NAMES``, or names outside the provider name rule): NATS user names are one
namespace for the whole server, which refuses a duplicate and exits.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import secrets
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterable, Mapping, Sequence

from dcm_status_contracts import limits as contract_limits
from dcm_status_contracts.errors import ConfigError
from dcm_status_contracts.identity import PROVIDER_NAME, RESERVED_PROVIDER_NAMES

from infra.topology import NatsSpec, load

PLATFORM_ACCOUNT = "PLATFORM"
PLATFORM_USER = "platform"  # the ingress connects as this user (a name reserved: no provider can have it)
CONTROL_PLANE_USER = "control-plane"  # the control-plane's user, by default (reserved as well: tests/unit check it)
INBOX = "_INBOX.>"
# bcrypt's cost: 2^10 rounds, 69 ms to hash or check on this kind of machine (nats-server checks on every
# connection; the generator hashes every user each time it writes). The passwords are 192 random bits: the
# hash keeps them out of the configuration; no cost would make guessing one any less hopeless.
BCRYPT_COST = 10
# What a NATS message carries beyond the CloudEvent ingest measures (data + attribute names and values): the
# header block's framing ("NATS/1.0", ": " and CRLF per header: 412 bytes for Pub/Sub's 100 attributes) and the
# headers the ingress reads but does not count (Nats-Msg-Id, traceparent, tracestate: at most 512 bytes each).
NATS_HEADER_ALLOWANCE = 4_096
PUBSUB_MAX_MESSAGE_BYTES = 10_000_000  # a Pub/Sub message, data and attributes (Pub/Sub's quotas and limits)
NATS_DEFAULT_MAX_PAYLOAD = 1_048_576  # nats-server's own max_payload unless its configuration says more
UNLIMITED = -1


@dataclass(frozen=True)
class AccountLimits:
    """What one account may hold on the server at once (its ``limits {}``); UNLIMITED: no limit. nats-server
    refuses a connection past ``connections`` ("maximum account active connections exceeded"), a subscription
    past ``subscriptions``, and a message larger than ``payload`` ("maximum payload exceeded", the publisher's
    connection closed)."""

    connections: int
    subscriptions: int
    payload: int

    def block(self) -> str:
        values = {"max_connections": self.connections, "max_subscriptions": self.subscriptions,
                  "max_payload": self.payload}
        return "limits: {" + ", ".join(f"{k}: {v}" for k, v in values.items() if v != UNLIMITED) + "}"


def max_payload(max_event_bytes: int) -> int:
    """The largest NATS message worth carrying: the largest event ingest accepts (DCM_MAX_EVENT_BYTES, Terraform
    max_event_bytes) with its NATS headers' framing, never more than one Pub/Sub message. Anything larger would
    only be dead-lettered as ``oversize``: the server refuses it at the source instead."""
    if max_event_bytes < 1:
        raise ConfigError(f"the largest event must be at least 1 byte, got {max_event_bytes}")
    return min(max_event_bytes + NATS_HEADER_ALLOWANCE, PUBSUB_MAX_MESSAGE_BYTES)


@dataclass(frozen=True)
class Limits:
    """The limits of every provider account and of the platform account. A provider: a few publishers, each
    one connection with at most one subscription (its ``_INBOX`` for JetStream acks). The platform: the
    ingress's instances, a control-plane, an operator's tools; its subscriptions unlimited (the ingress holds a
    pull subscription per consumer it reads, and the platform's users are the platform's own)."""

    provider: AccountLimits = AccountLimits(64, 256, max_payload(contract_limits.MAX_EVENT_BYTES))
    platform: AccountLimits = AccountLimits(64, UNLIMITED, max_payload(contract_limits.MAX_EVENT_BYTES))

    @classmethod
    def for_events(cls, max_event_bytes: int, provider_connections: int = 64, provider_subscriptions: int = 256,
                   platform_connections: int = 64) -> Limits:
        payload = max_payload(max_event_bytes)
        for name, value in (("provider connections", provider_connections),
                            ("provider subscriptions", provider_subscriptions),
                            ("platform connections", platform_connections)):
            if value < 1:
                raise ConfigError(f"{name} must be at least 1, got {value}")
        return cls(AccountLimits(provider_connections, provider_subscriptions, payload),
                   AccountLimits(platform_connections, UNLIMITED, payload))

    @classmethod
    def from_env(cls, env: Mapping[str, str]) -> Limits:
        """Sized to DCM_MAX_EVENT_BYTES, as the functions read it (the local stack passes its shell's on)."""
        text = env.get("DCM_MAX_EVENT_BYTES") or str(contract_limits.MAX_EVENT_BYTES)
        try:
            return cls.for_events(int(text))
        except ValueError:
            raise ConfigError(f"DCM_MAX_EVENT_BYTES must be an integer, got {text[:40]!r}") from None

    def largest_payload(self) -> int:
        return max(self.provider.payload, self.platform.payload)


STREAM_TOKEN = re.compile(r"^[A-Za-z0-9_-]{1,255}$")  # a JetStream stream or consumer name: one subject token


@dataclass(frozen=True)
class ConsumerRef:
    """A durable consumer on a stream (``STREAM:CONSUMER``), as a control-plane reads it."""

    stream: str
    consumer: str

    @classmethod
    def parse(cls, text: str) -> ConsumerRef:
        stream, colon, consumer = text.partition(":")
        if not (colon and STREAM_TOKEN.match(stream) and STREAM_TOKEN.match(consumer)):
            raise ConfigError(f"a consumer is STREAM:CONSUMER, each 1-255 letters, digits, '_' or '-', got "
                              f"{text[:80]!r}")
        return cls(stream, consumer)

    def api_subjects(self) -> list[str]:
        """What a pull consumer's reader publishes: its consumer's (and stream's) info, its next messages, its
        acks (ack, nak, in progress, term: ``$JS.ACK.<stream>.<consumer>.<delivered>.<seq>...``)."""
        s, c = self.stream, self.consumer
        return [f"$JS.API.STREAM.INFO.{s}", f"$JS.API.CONSUMER.INFO.{s}.{c}", f"$JS.API.CONSUMER.MSG.NEXT.{s}.{c}",
                f"$JS.ACK.{s}.{c}.>"]


def control_plane_permissions(consumers: Sequence[ConsumerRef]) -> dict[str, dict[str, list[str]]]:
    """A control-plane's least permissions: read and ack from ``consumers`` only (several: one per stream when
    each provider has its own), hear the answers on its ``_INBOX``; never publish a provider's subject, create,
    change or delete a stream or a consumer, or read another consumer."""
    if not consumers:
        raise ConfigError("a control-plane user needs at least one consumer (--control-plane-consumer STREAM:CONSUMER)")
    allow = [subject for ref in consumers for subject in ref.api_subjects()]
    return {"publish": {"allow": list(dict.fromkeys(allow)), "deny": ["providers.>"]},
            "subscribe": {"allow": [INBOX]}}


@dataclass(frozen=True)
class ControlPlane:
    """A control-plane user of the platform account and the durable consumers it reads."""

    user: str
    consumers: tuple[ConsumerRef, ...]

    def __post_init__(self) -> None:
        check_platform_user(self.user)
        control_plane_permissions(self.consumers)  # refuses none


def check_platform_user(name: str) -> None:
    """A platform user's name must be one no provider can take: reserved, or outside the provider name rule
    (NATS user names are one namespace: a provider of the same name would stop the server)."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]{1,128}", name):
        raise ConfigError(f"a NATS user name is 1-128 letters, digits, '_', '.' or '-', got {name[:80]!r}")
    if name == PLATFORM_USER:
        raise ConfigError(f"{PLATFORM_USER!r} is the ingress's user: give the control-plane its own")
    if PROVIDER_NAME.match(name) and name not in RESERVED_PROVIDER_NAMES:
        raise ConfigError(f"user name {name!r} could be a provider's (each provider's NATS user is its name): "
                          f"use {CONTROL_PLANE_USER!r}, or a name with '_' or '.' (e.g. control_plane)")


@dataclass(frozen=True)
class Identity:
    """One NATS user: its account, name and password."""

    account: str
    user: str
    password: str = field(repr=False)

    def url(self, server_url: str) -> str:
        """``nats://user:password@host:port`` (what an unchanged provider's NATS_URL may be)."""
        scheme, _, rest = server_url.partition("://")
        return f"{scheme}://{self.user}:{self.password}@{rest}"


def account_of(provider: str) -> str:
    """The NATS account of a provider (``osac`` -> ``PROVIDER_OSAC``)."""
    return "PROVIDER_" + re.sub(r"[^A-Z0-9]", "_", provider.upper())


@dataclass(frozen=True)
class Credentials:
    """The platform's identity, every provider's and the control-plane users' (passwords generated, kept in a
    0600 file)."""

    platform: Identity
    providers: Mapping[str, Identity]
    control_plane: Mapping[str, Identity] = field(default_factory=dict)

    def provider(self, name: str) -> Identity | None:
        return self.providers.get(name)


def _password() -> str:
    return secrets.token_urlsafe(24)


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path``, readable by its owner only (mode 0600 from its creation)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o600)
    os.replace(tmp, path)


def ensure_credentials(path: Path, providers: Iterable[str], control_plane_users: Iterable[str] = ()) -> Credentials:
    """The credentials kept in ``path``, with a new password for each provider (and control-plane user) not
    there yet (file 0600)."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    platform = doc.get("platform") or _password()
    known = dict(doc.get("providers") or {})
    operators = dict(doc.get("control_plane") or {})
    missing = [p for p in providers if p not in known]
    for p in missing:
        known[p] = _password()
    new_users = [u for u in control_plane_users if u not in operators]
    for u in new_users:
        operators[u] = _password()
    if missing or new_users or not path.exists() or "platform" not in doc:
        body: dict = {"platform": platform, "providers": known, **({"control_plane": operators} if operators else {})}
        _write_private(path, json.dumps(body, indent=2, sort_keys=True))
    return Credentials(Identity(PLATFORM_ACCOUNT, PLATFORM_USER, platform),
                       {p: Identity(account_of(p), p, pw) for p, pw in sorted(known.items())},
                       {u: Identity(PLATFORM_ACCOUNT, u, pw) for u, pw in sorted(operators.items())})


def _q(value: str) -> str:
    return json.dumps(value)


def password_hash(password: str, cost: int = BCRYPT_COST) -> str:
    """The bcrypt hash nats-server checks ``password`` against (``$2b$10$...``): what the configuration holds."""
    import bcrypt  # the `local` extra; loaded when a configuration is written, not by every CLI command

    return bcrypt.hashpw(password.encode(), bcrypt.gensalt(cost)).decode()


def _user(identity: Identity, permissions: str | None = None) -> str:
    text = f"{{user: {_q(identity.user)}, password: {_q(password_hash(identity.password))}"
    return text + (f", permissions: {permissions}}}" if permissions else "}")


def _permissions(doc: Mapping[str, Mapping[str, list[str]]]) -> str:
    """{publish: {allow: [...], deny: [...]}, subscribe: {...}} in the server's syntax."""
    sides = (f"{side}: {{" + ", ".join(f"{rule}: [{', '.join(map(_q, subjects))}]" for rule, subjects in rules.items())
             + "}" for side, rules in doc.items())
    return "{" + ", ".join(sides) + "}"


def _provider_account(spec: NatsSpec, provider: str, identity: Identity, limits: AccountLimits) -> str:
    permissions = _permissions({"publish": {"allow": [spec.provider_subjects]}, "subscribe": {"allow": [INBOX]}})
    service = spec.subject_prefix(provider) + spec.provider_subjects
    return (f"  {identity.account} {{\n"
            f"    users: [{_user(identity, permissions)}]\n"
            f"    {limits.block()}\n"
            f"    imports: [{{service: {{account: {PLATFORM_ACCOUNT}, subject: {_q(service)}}}, "
            f"to: {_q(spec.provider_subjects)}}}]\n"
            f"  }}\n")


def _check_unique(providers: Sequence[str], control_plane: ControlPlane | None) -> None:
    """One user name once on the whole server (nats-server exits on a duplicate): refused here, in one line."""
    for problem in (p for p in providers if p in RESERVED_PROVIDER_NAMES):
        raise ConfigError(f"provider name {problem!r} is reserved: the platform's own NATS users are named "
                          f"{', '.join(RESERVED_PROVIDER_NAMES)}")
    if control_plane and control_plane.user in providers:
        raise ConfigError(f"the control-plane user {control_plane.user!r} is also a provider's name")


def accounts_block(spec: NatsSpec, credentials: Credentials, providers: Iterable[str], limits: Limits = Limits(),
                   control_plane: ControlPlane | None = None) -> str:
    """The ``accounts {}`` block: the platform account (JetStream, one service export per provider, the
    ingress's user and an optional control-plane user) and one account per provider, each with its limits."""
    providers = sorted(providers)
    _check_unique(providers, control_plane)
    exports = "".join(f"      {{service: {_q(spec.subject_prefix(p) + spec.provider_subjects)}, "
                      f"accounts: [{account_of(p)}]}}\n" for p in providers)
    users = [_user(credentials.platform)]
    if control_plane:
        identity = credentials.control_plane[control_plane.user]
        users.append(_user(identity, _permissions(control_plane_permissions(control_plane.consumers))))
    text = (f"accounts {{\n  {PLATFORM_ACCOUNT} {{\n    jetstream: enabled\n"
            f"    users: [\n" + "".join(f"      {u}\n" for u in users) + "    ]\n"
            f"    {limits.platform.block()}\n"
            f"    exports: [\n{exports}    ]\n  }}\n")
    text += "".join(_provider_account(spec, p, credentials.providers[p], limits.provider) for p in providers)
    return text + "}\n"


def server_config(spec: NatsSpec, credentials: Credentials, providers: Iterable[str], *, port: int,
                  http_port: int | None = None, store_dir: Path | None = None, host: str = "127.0.0.1",
                  limits: Limits = Limits(), control_plane: ControlPlane | None = None) -> str:
    """The whole nats-server configuration: listen address, JetStream store, accounts (with their limits)."""
    lines = [f"host: {_q(host)}", f"port: {port}"]
    if http_port:
        lines.append(f"http: {_q(f'{host}:{http_port}')}")  # /healthz, /varz (monitoring: no secrets)
    if limits.largest_payload() > NATS_DEFAULT_MAX_PAYLOAD:  # the server's own bound comes before an account's
        lines.append(f"max_payload: {limits.largest_payload()}")
    lines.append(f"jetstream {{ store_dir: {_q(str(store_dir))} }}" if store_dir else "jetstream: enabled")
    return "\n".join(lines) + "\n" + accounts_block(spec, credentials, providers, limits, control_plane)


def write_config(path: Path, text: str) -> None:
    """The configuration holds passwords: mode 0600."""
    _write_private(path, text)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--credentials", required=True, type=Path,
                        help="the JSON file of passwords (made, mode 0600, if missing)")
    parser.add_argument("--providers", default=None, help="comma-separated (default: the topology's)")
    parser.add_argument("--port", type=int, default=4222)
    parser.add_argument("--store-dir", type=Path, default=None)
    parser.add_argument("--max-event-bytes", type=int, default=contract_limits.MAX_EVENT_BYTES,
                        help="the largest event ingest accepts (Terraform max_event_bytes): sizes max_payload")
    parser.add_argument("--provider-connections", type=int, default=64, help="connections per provider account")
    parser.add_argument("--provider-subscriptions", type=int, default=256, help="subscriptions per provider account")
    parser.add_argument("--platform-connections", type=int, default=64, help="connections of the platform account")
    parser.add_argument("--control-plane-user", default=None,
                        help=f"add a control-plane user to the platform account (e.g. {CONTROL_PLANE_USER}) that may "
                             "only read and ack from its consumers")
    parser.add_argument("--control-plane-consumer", action="append", default=None, metavar="STREAM:CONSUMER",
                        help="a durable consumer it reads (repeatable; default: the topology's control-plane stream and the "
                             "consumer control-plane)")
    args = parser.parse_args(argv)
    try:
        return _generate(args)
    except ConfigError as exc:
        print(f"nats_accounts: {exc}", file=sys.stderr)
        return 2


def _generate(args: argparse.Namespace) -> int:
    topology = load([p for p in args.providers.split(",") if p] if args.providers else None)
    if topology.nats is None:
        print("infra/topology.yaml declares no nats: section", file=sys.stderr)
        return 1
    limits = Limits.for_events(args.max_event_bytes, args.provider_connections, args.provider_subscriptions,
                               args.platform_connections)
    control_plane = None
    if args.control_plane_user:
        consumers = args.control_plane_consumer or [f"{topology.nats.control_plane_stream}:control-plane"]
        control_plane = ControlPlane(args.control_plane_user, tuple(ConsumerRef.parse(c) for c in consumers))
    elif args.control_plane_consumer:
        raise ConfigError("--control-plane-consumer needs --control-plane-user")
    credentials = ensure_credentials(args.credentials, topology.providers,
                                     [control_plane.user] if control_plane else [])
    sys.stdout.write(server_config(topology.nats, credentials, topology.providers, port=args.port,
                                   store_dir=args.store_dir, host="0.0.0.0", limits=limits,
                                   control_plane=control_plane))
    return 0


if __name__ == "__main__":
    sys.exit(main())
