"""The nats-server configuration of the NATS ingress, generated from the topology: one account per provider.

    python -m infra.nats_accounts --credentials FILE [--providers a,b] [--port 4222] > nats-server.conf

Each provider is an account of its own with one user, allowed to publish only ``provider_subjects``
(``dcm.>``) and to subscribe only to its ``_INBOX.>`` (where a JetStream publish's ack comes back). The
platform account exports one service per provider, ``providers.{provider}.dcm.>``, to that provider's
account alone, which imports it as ``dcm.>``: what osac publishes on ``dcm.vm`` reaches the platform as
``providers.osac.dcm.vm``, whether it published with core NATS (no ack) or JetStream (its ack routed back
through the import). The platform's stream captures ``providers.*.dcm.>``; the ingress reads the provider
from that server-written prefix. A provider that publishes anything else (``providers.aws.dcm.vm``, a
JetStream API subject) is refused by the server (a permissions violation), and its own account has no
JetStream and no other import: it can neither reach the platform account's subjects nor another's.

(A *stream* export from each provider account with a ``to`` prefix carries a core publish just as well,
but no JetStream ack: the kubevirt and osac providers publish with ``js.Publish`` and would time out and
retry forever. Measured with nats-server 2.15.1.)

The passwords are generated once (``secrets``) and kept in a JSON file of mode 0600 beside the server's
configuration (also 0600); nothing here logs them. In production the same generator writes the
configuration, and the passwords come from the operator's secret store (docs/nats.md).
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
from typing import Iterable, Mapping

from infra.topology import NatsSpec, load

PLATFORM_ACCOUNT = "PLATFORM"
PLATFORM_USER = "platform"  # the ingress (and a control-plane consumer) connect as this user
INBOX = "_INBOX.>"


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
    """The platform's identity and every provider's (passwords generated, kept in a 0600 file)."""

    platform: Identity
    providers: Mapping[str, Identity]

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


def ensure_credentials(path: Path, providers: Iterable[str]) -> Credentials:
    """The credentials kept in ``path``, with a new password for each provider not there yet (file 0600)."""
    doc = json.loads(path.read_text()) if path.exists() else {}
    platform = doc.get("platform") or _password()
    known = dict(doc.get("providers") or {})
    missing = [p for p in providers if p not in known]
    for p in missing:
        known[p] = _password()
    if missing or not path.exists() or "platform" not in doc:
        _write_private(path, json.dumps({"platform": platform, "providers": known}, indent=2, sort_keys=True))
    return Credentials(Identity(PLATFORM_ACCOUNT, PLATFORM_USER, platform),
                       {p: Identity(account_of(p), p, pw) for p, pw in sorted(known.items())})


def _q(value: str) -> str:
    return json.dumps(value)


def _provider_account(spec: NatsSpec, provider: str, identity: Identity) -> str:
    permissions = (f"{{publish: {{allow: [{_q(spec.provider_subjects)}]}}, "
                   f"subscribe: {{allow: [{_q(INBOX)}]}}}}")
    service = spec.subject_prefix(provider) + spec.provider_subjects
    return (f"  {identity.account} {{\n"
            f"    users: [{{user: {_q(identity.user)}, password: {_q(identity.password)}, "
            f"permissions: {permissions}}}]\n"
            f"    imports: [{{service: {{account: {PLATFORM_ACCOUNT}, subject: {_q(service)}}}, "
            f"to: {_q(spec.provider_subjects)}}}]\n"
            f"  }}\n")


def accounts_block(spec: NatsSpec, credentials: Credentials, providers: Iterable[str]) -> str:
    """The ``accounts {}`` block: the platform account (JetStream, one service export per provider) and one
    account per provider."""
    providers = sorted(providers)
    exports = "".join(f"      {{service: {_q(spec.subject_prefix(p) + spec.provider_subjects)}, "
                      f"accounts: [{account_of(p)}]}}\n" for p in providers)
    platform = credentials.platform
    text = (f"accounts {{\n  {PLATFORM_ACCOUNT} {{\n    jetstream: enabled\n"
            f"    users: [{{user: {_q(platform.user)}, password: {_q(platform.password)}}}]\n"
            f"    exports: [\n{exports}    ]\n  }}\n")
    text += "".join(_provider_account(spec, p, credentials.providers[p]) for p in providers)
    return text + "}\n"


def server_config(spec: NatsSpec, credentials: Credentials, providers: Iterable[str], *, port: int,
                  http_port: int | None = None, store_dir: Path | None = None, host: str = "127.0.0.1") -> str:
    """The whole nats-server configuration: listen address, JetStream store, accounts."""
    lines = [f"host: {_q(host)}", f"port: {port}"]
    if http_port:
        lines.append(f"http: {_q(f'{host}:{http_port}')}")  # /healthz, /varz (monitoring: no secrets)
    lines.append(f"jetstream {{ store_dir: {_q(str(store_dir))} }}" if store_dir else "jetstream: enabled")
    return "\n".join(lines) + "\n" + accounts_block(spec, credentials, providers)


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
    args = parser.parse_args(argv)
    topology = load([p for p in args.providers.split(",") if p] if args.providers else None)
    if topology.nats is None:
        print("infra/topology.yaml declares no nats: section", file=sys.stderr)
        return 1
    credentials = ensure_credentials(args.credentials, topology.providers)
    sys.stdout.write(server_config(topology.nats, credentials, topology.providers, port=args.port,
                                   store_dir=args.store_dir, host="0.0.0.0"))
    return 0


if __name__ == "__main__":
    sys.exit(main())
