"""Registering webhook callbacks: what the api's ``/v1/callbacks`` and ``PUT .../callback``
(shared/api/callbacks.py binds the api's callers to it) and the operator's ``dcm-status callbacks`` do.

A hook is vetted when it is registered (https only in production; its host must resolve to
public addresses only: hooks.py) and again at every delivery, against the
address actually connected to (egress.py). A callback's signing secret is
returned once, when it is created or rotated, and never shown again.

Who acts is a ``Party`` (the api's caller, or the operator); ``identify`` names it, or says why
nobody can be named (the api's rule: shared/api/callers.py ``require_identity``).
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any, Callable, Mapping, Protocol

from dcm_status_contracts import timeutil
from dcm_status_contracts.errors import Forbidden, LimitReached, NotFound
from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.callbacks import egress, registration, webhook
from shared.callbacks import summary as callback_summary
from shared.callbacks.registration import Callback, Filter, Scope, SigningSecret
from shared.runtime import firestore as fs
from shared.runtime import secretbox
from shared.state import aggregates
from shared.state.documents import CALLBACKS

MAX_LISTED = 1000


class Party(Protocol):
    """Who acts on a callback: the api's caller (shared/api/callers.py ``Caller``), or the operator."""

    def owns(self, owner: str | None) -> bool: ...

    def may_change(self, owner: str | None) -> bool: ...


class Registry:
    def __init__(self, db: firestore.Client, local_mode: bool, hook_timeout: float = 10.0,
                 resolver: egress.Resolver = egress.resolve, post: Callable[..., egress.HookResponse] = egress.post,
                 clock: Callable[[], datetime] = timeutil.now, max_per_caller: int = 100, max_total: int = 10_000,
                 keys: secretbox.KeySource | None = None, hook_ports: tuple[int, ...] = (), *,
                 operator: Party, identify: Callable[[Any], str]):
        """``operator``: who acts when no caller is given (the CLI, with Firestore credentials: an admin);
        ``identify(party)``: its identity, or the error saying why it has none."""
        self.db = db
        self.identify = identify
        self._keys = keys  # seals the signing secrets (None: the environment's, read when first needed)
        self.hook_ports = tuple(hook_ports)  # ports allowed beside 443 (DCM_HOOK_PORTS)
        self.local_mode = local_mode
        self.max_per_caller, self.max_total = max_per_caller, max_total
        self.operator = operator
        self.hook_timeout = hook_timeout
        self.resolver = resolver
        self.post = post
        self.clock = clock

    def _ref(self, callback_id: str) -> Any:
        return self.db.collection(CALLBACKS).document(callback_id)

    def _vet(self, hook: str) -> None:
        # InvalidRequest: why it may not be called
        egress.vetted_address(hook, self.local_mode, self.resolver, self.hook_ports)

    @property
    def keys(self) -> secretbox.KeySource:
        if self._keys is None:
            self._keys = secretbox.from_env(local_mode=self.local_mode)
        return self._keys

    def _sealed(self, cb: Callback) -> Callback:
        """``cb`` with its new secrets sealed for storage (never stored in clear: shared/runtime/secretbox.py)."""
        return cb.sealed(self.keys.seal)

    def _new(self, callback_id: str, hook: str, scope: Scope, token: Any, retry_seconds: Any, owner: str,
             key: str | None = None, where: Filter = Filter()) -> tuple[Callback, str]:
        secret = registration.new_secret()
        cb = Callback(id=callback_id, hook=hook, scope=scope, created_at=timeutil.format(self.clock()),
                      secrets=(SigningSecret(secret),), token=registration.check_token(token), key=key, filter=where,
                      retry_seconds=registration.check_retry_seconds(retry_seconds), owner=owner)
        return self._sealed(cb), secret

    def _within_caps(self, owner: str) -> None:
        """LimitReached when the owner holds as many callbacks as one may, or all do as many as may be
        (each callback is a signed POST per matching change: an unbounded number is an amplifier).
        Counted before the write: concurrent registrations can pass a cap by a few."""
        mine = self.db.collection(CALLBACKS).where(filter=FieldFilter("owner", "==", owner))
        with fs.guard("counting callbacks"):
            held = aggregates.counts({"mine": mine, "all": self.db.collection(CALLBACKS)}, fs.read_options())
        if held["mine"] >= self.max_per_caller:
            raise LimitReached(f"{owner} holds {held['mine']} callbacks, the most one caller may "
                               f"(DCM_MAX_CALLBACKS_PER_CALLER={self.max_per_caller}); remove one first", "hook")
        if held["all"] >= self.max_total:
            raise LimitReached(f"{held['all']} callbacks are registered, the most there may be "
                               f"(DCM_MAX_CALLBACKS={self.max_total})", "hook")

    def _may_change(self, callback_id: str, doc: Mapping[str, Any], caller: Party) -> None:
        self.identify(caller)  # nobody the api can name: 401 (503 while Google's keys cannot be had), not 403
        if not caller.may_change(doc.get("owner")):
            raise Forbidden(f"callback {callback_id} is {doc.get('owner') or 'an operator'}'s: only its owner or an "
                            "admin (DCM_API_ADMINS) may change it", "id")

    # ---- register --------------------------------------------------------------------------------
    def put_resource(self, key: str, hook: str, token: Any = None, retry_seconds: Any = None,
                     caller: Party | None = None) -> tuple[dict[str, Any], str | None] | None:
        """The tracker's ``PUT .../callback?hook=...``: set the resource's one callback, or with
        ``hook=none`` delete it (None). Only its owner or an admin changes an existing one; a changed
        hook gets a new signing secret (the old receiver's must not sign for the new one), its stats stay.
        Returns the callback as shown and, when it was created or its hook changed, its new secret."""
        done = self.register_resource(key, hook, token, retry_seconds, caller)
        return None if done is None else (done[0], done[1])

    def register_resource(self, key: str, hook: str, token: Any = None, retry_seconds: Any = None,
                          caller: Party | None = None) -> tuple[dict[str, Any], str | None, bool] | None:
        """``put_resource``, and whether the callback was created (True) or changed (False)."""
        caller = caller or self.operator
        owner = self.identify(caller)
        callback_id = registration.resource_callback_id(key)
        if hook == registration.NONE:
            self.remove(callback_id, caller)
            return None
        self._vet(hook)
        ref = self._ref(callback_id)

        @firestore.transactional
        def run(transaction: Any) -> tuple[Callback | None, str | None]:
            snap = ref.get(transaction=transaction)
            summary = callback_summary.for_update(self.db, transaction, callback_id)
            if snap.exists:
                doc = snap.to_dict()
                self._may_change(callback_id, doc, caller)
                fields = {"hook": hook, "token": registration.check_token(token), "disabled": None,
                          "retrySeconds": registration.check_retry_seconds(retry_seconds)}
                secret = None
                if hook != doc.get("hook"):
                    secret = registration.new_secret()
                    fresh = replace(Callback.from_doc(callback_id, doc), secrets=(SigningSecret(secret),))
                    fields["secrets"] = self._sealed(fresh).to_doc()["secrets"]
                transaction.update(ref, fields)
                before = Callback.from_doc(callback_id, doc)
                callback_summary.write(self.db, transaction, summary, before, replace(before, disabled=None))
                return None, secret
            self._within_caps(owner)
            cb, secret = self._new(callback_id, hook, Scope.RESOURCE, token, retry_seconds, owner, key=key)
            transaction.set(ref, cb.to_doc())
            callback_summary.write(self.db, transaction, summary, None, cb)
            return cb, secret

        with fs.guard("registering a callback"):
            created, secret = run(self.db.transaction())
        if created is None:
            return self.show(callback_id, self._viewer(caller)), secret, False
        return registration.public(callback_id, created.to_doc()), secret, True

    def add(self, hook: str, where: Mapping[str, Any] | None = None, token: Any = None,
            retry_seconds: Any = None, caller: Party | None = None) -> tuple[dict[str, Any], str]:
        """A filter callback (every change the filter matches); returns it as shown, and its secret."""
        owner = self.identify(caller or self.operator)
        self._vet(hook)
        cb, secret = self._new(registration.new_callback_id(), hook, Scope.FILTER, token, retry_seconds, owner,
                               where=Filter.of(where))
        self._within_caps(owner)
        with fs.guard("registering a callback"):
            self._create(cb)
        return registration.public(cb.id, cb.to_doc()), secret

    def _create(self, cb: Callback) -> None:
        """The new callback and, in the same transaction, the callbacks' summary (summary.py:
        what upsert decides a change event's ``notify`` by)."""
        ref = self._ref(cb.id)

        @firestore.transactional
        def run(transaction: Any) -> None:
            summary = callback_summary.for_update(self.db, transaction, cb.id)
            transaction.create(ref, cb.to_doc())
            callback_summary.write(self.db, transaction, summary, None, cb)

        run(self.db.transaction())

    # ---- read ------------------------------------------------------------------------------------
    def _doc(self, callback_id: str, caller: Party | None = None) -> dict[str, Any]:
        """The stored callback; with ``caller``, Forbidden unless the caller may change it."""
        if not callback_id or len(callback_id) > 64 or not fs.is_document_id(callback_id):
            raise NotFound(f"no callback {callback_id[:64]!r}", "id")
        with fs.guard("reading a callback"):
            snap = self._ref(callback_id).get(retry=fs.RETRY, timeout=fs.TIMEOUT)
        if not snap.exists:
            raise NotFound(f"no callback {callback_id!r}", "id")
        doc = snap.to_dict()
        if caller is not None:
            self._may_change(callback_id, doc, caller)
        return doc

    def _public(self, callback_id: str, doc: Mapping[str, Any], viewer: Party | None) -> dict[str, Any]:
        """As ``viewer`` may see it: in full to its owner (and to the operator's CLI, ``viewer`` None);
        to anyone else without its token and its hook's path and query."""
        return registration.public(callback_id, doc, full=viewer is None or viewer.owns(doc.get("owner")))

    def _viewer(self, caller: Party) -> Party | None:
        return None if caller is self.operator else caller

    def show(self, callback_id: str, viewer: Party | None = None) -> dict[str, Any]:
        return self._public(callback_id, self._doc(callback_id), viewer)

    def of_resource(self, key: str, viewer: Party | None = None) -> dict[str, Any]:
        callback_id = registration.resource_callback_id(key)
        try:
            return self.show(callback_id, viewer)
        except NotFound:
            raise NotFound(f"no callback on {key}") from None

    def element_of(self, key: str, href: str, viewer: Party | None = None) -> dict[str, Any] | None:
        """The callback element of a resource's representation, as the tracker has it (its hook and token,
        as ``viewer`` may see them) and where it is managed (``href``); None when the resource has none."""
        try:
            shown = self.of_resource(key, viewer)
        except NotFound:
            return None
        return {"id": shown["id"], "href": href, "hook": shown["hook"], "token": shown["token"],
                "redacted": shown["redacted"], "disabled": shown["disabled"]}

    def list(self, scope: Scope | None = None, viewer: Party | None = None) -> list[dict[str, Any]]:
        query: Any = self.db.collection(CALLBACKS)
        if scope is not None:
            query = query.where(filter=FieldFilter("scope", "==", scope.value))
        with fs.guard("listing callbacks"):
            snaps = list(query.limit(MAX_LISTED).stream(**fs.read_options()))
        return [self._public(s.id, s.to_dict(), viewer) for s in snaps]

    # ---- change ----------------------------------------------------------------------------------
    def remove(self, callback_id: str, caller: Party | None = None) -> None:
        self._changed(callback_id, caller or self.operator, "removing a callback", None, lambda cb: None)

    def _changed(self, callback_id: str, caller: Party, what: str, fields: Mapping[str, Any] | None,
                 after: Callable[[Callback], Callback | None]) -> None:
        """Read the callback (NotFound, Forbidden unless ``caller`` may change it), then write it (``fields``; None
        deletes it) and the callbacks' summary in one transaction: the summary counts what the callback was when
        written (a concurrent change of it makes the transaction run again)."""
        self._doc(callback_id, caller)  # NotFound when there is none; Forbidden
        ref = self._ref(callback_id)

        @firestore.transactional
        def run(transaction: Any) -> None:
            snap = ref.get(transaction=transaction)
            summary = callback_summary.for_update(self.db, transaction, callback_id)
            if not snap.exists:
                raise NotFound(f"no callback {callback_id!r}", "id")
            before = Callback.from_doc(callback_id, snap.to_dict())
            if fields is None:
                transaction.delete(ref)
            else:
                transaction.update(ref, dict(fields))
            callback_summary.write(self.db, transaction, summary, before, after(before))

        with fs.guard(what):
            run(self.db.transaction())

    def rotate(self, callback_id: str, grace_seconds: int = registration.DEFAULT_ROTATION_GRACE_SECONDS,
               caller: Party | None = None) -> tuple[dict[str, Any], str]:
        """A new signing secret (returned once); the previous one signs on for ``grace_seconds``."""
        caller = caller or self.operator
        doc = self._doc(callback_id, caller)
        cb, secret = Callback.from_doc(callback_id, doc).rotated(self.clock(), grace_seconds)
        with fs.guard("rotating a callback's secret"):
            self._ref(callback_id).update({"secrets": self._sealed(cb).to_doc()["secrets"]}, retry=fs.RETRY,
                                          timeout=fs.TIMEOUT)
        return self.show(callback_id, self._viewer(caller)), secret

    def enable(self, callback_id: str, caller: Party | None = None) -> dict[str, Any]:
        """Call a disabled callback again (after its receiver's 410), its failure count reset."""
        caller = caller or self.operator
        self._changed(callback_id, caller, "enabling a callback",
                      {"disabled": None, "stats.consecutiveFailures": 0}, lambda cb: replace(cb, disabled=None))
        return self.show(callback_id, self._viewer(caller))

    def test(self, callback_id: str, caller: Party | None = None) -> dict[str, Any]:
        """Send the callback a signed test delivery now (``"test": true``, no change); whether it was
        delivered and, as a category (``egress.CallOutcome``), what came of it: never the receiver's error
        text, status or timing (a test is no port scanner)."""
        now = self.clock()
        cb, _ = Callback.from_doc(callback_id, self._doc(callback_id, caller or self.operator)).opened(
            self.keys.open, now)
        if not cb.signing_secrets(now):
            return {"delivered": False, "outcome": egress.CallOutcome.SECRET_UNAVAILABLE.value}
        ping_id, payload = webhook.ping(cb.id, cb.token, now)
        headers = webhook.signed_headers(cb.signing_secrets(now), ping_id, now, payload)
        sent = self.post(cb.hook, payload, headers, self.hook_timeout, self.local_mode, self.resolver,
                         ports=self.hook_ports)
        return {"delivered": sent.ok, "outcome": sent.category.value}
