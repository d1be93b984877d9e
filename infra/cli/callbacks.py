"""``dcm-status callbacks``: register, inspect, test and remove webhook callbacks.

The same registration the api serves (shared/callbacks/registry.py), run with the operator's own
credentials; the hook rules are the production ones unless the local stack is running (there,
loopback hooks are allowed, and the command says so).
"""

from __future__ import annotations

from typing import Any

import click
from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import ConfigError
from dcm_status_contracts.model import ResourceKey

from infra.cli.common import connect
from infra.console import JSON, WIDE, emit_json, fields, table, to_text
from infra.local.stack import LocalStack
from shared.api.callbacks import Callbacks
from shared.callbacks import registration
from shared.callbacks import summary as callback_summary
from shared.callbacks.registration import Scope
from shared.callbacks.store import CallbackStore
from shared.runtime import secretbox

COLUMNS = ("id", "hook", "for", "delivered", "failing", "last success", "state")  # last failure: show


def _keys(local: bool) -> secretbox.KeySource:
    """The keyring the functions use: the local stack's file, else DCM_CALLBACK_KEYS_SECRET (Secret Manager)."""
    try:
        if local:
            return LocalStack().callback_keys_source()
        return secretbox.from_env(local_mode=False)
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None


def _registry() -> Callbacks:
    conn = connect()
    if conn.local:
        click.echo("local stack: plain http and loopback hooks are allowed, on any port (production wants https, "
                   "a public address and port 443)", err=True)
    return Callbacks(conn.firestore(), local_mode=conn.local, keys=_keys(conn.local))


def _scope(c: dict[str, Any]) -> str:
    if c["scope"] == Scope.RESOURCE.value:
        return c["key"]
    return " ".join(f"{k}={v}" for k, v in (c.get("filter") or {}).items()) or "every change"


def _cells(c: dict[str, Any]) -> tuple[str, ...]:
    s = c["stats"]
    return (c["id"], c["hook"], _scope(c), str(s["delivered"]), str(s["consecutiveFailures"]),
            to_text(s["lastSuccessAt"])[:19], "disabled" if c["disabled"] else "enabled")


def _created(shown: dict[str, Any], secret: str | None, as_json: bool) -> None:
    if as_json:
        emit_json({"callback": shown, **({"secret": secret} if secret else {})})
        return
    click.echo(f"callback {shown['id']}: {shown['hook']} for {_scope(shown)}")
    if secret:
        click.echo(f"signing secret (shown this once; verify deliveries with it): {secret}")


@click.group()
def callbacks():
    """Webhook callbacks: each change POSTed, signed (Standard Webhooks), to a receiver's URL.

    Example: dcm-status callbacks add --hook https://ops.example.com/cb --resource aws/vm/i-0abc
    """


@callbacks.command("add")
@click.option("--hook", required=True, help="The URL to POST changes to (https; a public address).")
@click.option("--resource", "key", default=None, help="One resource's changes: PROVIDER/TYPE/ID.")
@click.option("--provider", default=None, help="Only this provider's changes.")
@click.option("--type", "resource_type", default=None, help="Only this resource type's changes.")
@click.option("--status", default=None, help="Only changes to this status.")
@click.option("--label", default=None, help="Only resources with this label (tenant:acme).")
@click.option("--token", default=None, help="Sent back in every delivery's body.")
@click.option("--retry-seconds", type=click.IntRange(1, registration.MAX_RETRY_SECONDS), default=None,
              help="Give a failing delivery up after this long (default 3 days).")
@JSON
def add(hook, key, provider, resource_type, status, label, token, retry_seconds, as_json):
    """Register a callback for one resource (--resource; replaces its callback) or for every change a
    filter matches. Example: dcm-status callbacks add --hook https://ops.example.com/cb --status STOPPED
    """
    where = {k: v for k, v in (("provider", provider), ("type", resource_type), ("status", status),
                               ("label", label)) if v}
    if key:
        if where:
            raise click.UsageError("--resource takes no filter options: a resource's callback gets all its changes")
        try:
            key = str(ResourceKey.parse(key))
        except ValueError as exc:
            raise click.BadParameter(str(exc), param_hint="--resource") from exc
        if hook == registration.NONE:
            raise click.BadParameter("to remove a callback: dcm-status callbacks rm ID", param_hint="--hook")
    registry = _registry()
    if key:
        shown, secret = registry.put_resource(key, hook, token, retry_seconds)  # type: ignore[misc]
    else:
        shown, secret = registry.add(hook, where, token, retry_seconds)
    _created(shown, secret, as_json)


@callbacks.command("list")
@WIDE
@JSON
def list_(wide, as_json):
    """Every callback with its delivery stats. Example: dcm-status callbacks list --json"""
    found = _registry().list()
    if as_json:
        emit_json(found)
        return
    if not found:
        click.echo("no callbacks (dcm-status callbacks add --hook URL ...)")
        return
    table(COLUMNS, [_cells(c) for c in found], wide=wide, flexible=("hook", "for", "last success"))


@callbacks.command("show")
@click.argument("callback_id")
@JSON
def show(callback_id, as_json):
    """One callback: what it is for, and its delivery stats (last success, last failure, failures in a row).

    Example: dcm-status callbacks show f3b1706fad16646e7
    """
    c = _registry().show(callback_id)
    if as_json:
        emit_json(c)
        return
    fields([("id", c["id"]), ("hook", c["hook"]), ("for", _scope(c)), ("token", c["token"]),
            ("owner", c.get("owner")), ("retry period", f"{c['retrySeconds']} s"), ("created", c["createdAt"]),
            ("state", f"disabled: {c['disabled']}" if c["disabled"] else "enabled"),
            ("previous secret until", c["previousSecretValidUntil"]),
            *((f"stats.{k}", v) for k, v in c["stats"].items())])


@callbacks.command("rm")
@click.argument("callback_id")
def rm(callback_id):
    """Remove a callback (its pending deliveries are dropped). Example: dcm-status callbacks rm f3b1706fad16646e7
    """
    _registry().remove(callback_id)
    click.echo(f"removed {callback_id}")


@callbacks.command("test")
@click.argument("callback_id")
@JSON
def test(callback_id, as_json):
    """Send the callback a signed test delivery now ("test": true, no change) and say what came of it.

    Exits 1 when it was not delivered. Example: dcm-status callbacks test f3b1706fad16646e7
    """
    result = _registry().test(callback_id)
    if as_json:
        emit_json(result)
    else:
        click.echo("delivered" if result["delivered"] else f"not delivered: {result['outcome']} (its stats have "
                   f"the last error: dcm-status callbacks show {callback_id})")
    if not result["delivered"]:
        raise SystemExit(1)


@callbacks.command("rekey")
@click.option("--rotate", is_flag=True, help="Local stack: first add a new key to its keyring and make it primary.")
@click.option("--drop", "drop", default=None, metavar="KEY_ID",
              help="Local stack: then remove this key from its keyring (refused if a secret did not open).")
@JSON
def rekey(rotate, drop, as_json):
    """Seal every callback's signing secret again with the keyring's primary key (clear ones stored
    before encryption too); secrets past their rotation grace are dropped.

    Key rotation: add a key and make it primary, rekey, then drop the old key (docs/callbacks.md).
    Exits 1 when a secret did not open. Example: dcm-status callbacks rekey --rotate
    """
    conn = connect()
    keys = _keys(conn.local)
    path = LocalStack().callback_keys
    if rotate and drop:
        raise click.UsageError("--drop comes later: every instance re-reads the keyring within 5 minutes, and "
                               "one that still seals with the old key meanwhile would lose what it seals")
    if (rotate or drop) and not conn.local:
        raise click.UsageError("--rotate and --drop change the local stack's keyring; in production add a "
                               "version to the Secret Manager secret (docs/callbacks.md)")
    try:
        ring = keys.keyring()
        if rotate:
            ring = ring.with_new_primary()
            secretbox.write_file(path, ring)
        done = CallbackStore(conn.firestore()).rekey(ring, timeutil.now())
        if drop and not done.unavailable:
            secretbox.write_file(path, ring.without(drop))
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    if as_json:
        emit_json({"primary": done.primary, "callbacks": done.callbacks, "resealed": done.resealed,
                   "dropped": done.dropped, "unavailable": list(done.unavailable),
                   "droppedKey": drop if drop and not done.unavailable else None})
    else:
        click.echo(f"{done.resealed} secret(s) of {done.callbacks} callback(s) sealed again with key {done.primary}; "
                   f"{done.dropped} past their grace removed" + (f"; key {drop} removed" if drop and not
                                                                 done.unavailable else ""))
        for why in done.unavailable:
            click.echo(f"did not open: {why}", err=True)
    if done.unavailable:
        raise SystemExit(1)


@callbacks.command("summarize")
@JSON
def summarize(as_json):
    """Count every callback again into the callbacks' summary, by which upsert tells notify which changes no
    callback can match (docs/callbacks.md, "What notify costs"). Needed once after upgrading a deployment
    that had callbacks before the summary existed (until then every change goes to notify, as before);
    harmless at any time. Exits 1 if callbacks kept changing meanwhile (run it again).

    Example: dcm-status callbacks summarize
    """
    done = callback_summary.rebuild(connect().firestore())
    if done is None:
        click.echo("callbacks kept changing while they were counted; nothing changed: run it again", err=True)
        raise SystemExit(1)
    shown = {"filters": [{"filter": f.to_doc(), "callbacks": n} for f, n in done.filters.values()],
             "unlistedFilterCallbacks": done.overflow, "resourceCallbackTypes": sorted(done.resource_types),
             "revision": done.revision}
    if as_json:
        emit_json(shown)
        return
    click.echo(f"{sum(n for _, n in done.filters.values()) + done.overflow} enabled filter callback(s) in "
               f"{len(done.filters)} distinct filter(s)" + (f" (+{done.overflow} not listed)" if done.overflow else ""))
    click.echo("provider/type with enabled resource callbacks: " + (", ".join(sorted(done.resource_types)) or "none"))


@callbacks.command("keyring")
@click.option("--add-primary", is_flag=True, help="Print the keyring with a new random key, made primary.")
@click.option("--drop", "drop", default=None, metavar="KEY_ID", help="Print the keyring without this key.")
def keyring(add_primary, drop):
    """Show the key ids of the keyring that seals the signing secrets; with --add-primary or --drop,
    print the whole new keyring (JSON, keys included) for a new Secret Manager version.

    Example: dcm-status callbacks keyring --add-primary | gcloud secrets versions add dcm-callback-keys --data-file=-
    """
    if add_primary and drop:
        raise click.UsageError("one step at a time: --add-primary, rekey, then --drop (docs/callbacks.md)")
    conn = connect()
    try:
        ring = _keys(conn.local).keyring()
        if add_primary or drop:
            click.echo(ring.with_new_primary().to_json() if add_primary else ring.without(drop).to_json())
            return
    except ConfigError as exc:
        raise click.ClickException(str(exc)) from None
    shown = secretbox.describe(ring)
    click.echo(f"primary {shown['primary']}; keys {', '.join(shown['keys'])}")


@callbacks.command("rotate")
@click.argument("callback_id")
@click.option("--grace-seconds", type=click.IntRange(0, registration.MAX_RETRY_SECONDS),
              default=registration.DEFAULT_ROTATION_GRACE_SECONDS, show_default=True,
              help="How long the previous secret still signs (0: at once, for a leaked secret; the api "
                   "keeps at least DCM_MIN_ROTATION_GRACE_SECONDS).")
@JSON
def rotate(callback_id, grace_seconds, as_json):
    """A new signing secret (shown once); the previous one signs on for the grace period. The CLI acts as
    an operator (an admin: it holds Firestore credentials), on any callback.

    Example: dcm-status callbacks rotate f3b1706fad16646e7 --grace-seconds 3600
    """
    shown, secret = _registry().rotate(callback_id, grace_seconds)
    _created(shown, secret, as_json)


@callbacks.command("enable")
@click.argument("callback_id")
def enable(callback_id):
    """Call a disabled callback again (after its receiver answered 410 Gone).

    Example: dcm-status callbacks enable f3b1706fad16646e7
    """
    _registry().enable(callback_id)
    click.echo(f"enabled {callback_id}")
