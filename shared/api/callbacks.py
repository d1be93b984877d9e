"""Registering webhook callbacks: the api's ``/v1/callbacks`` and ``PUT .../callback`` and the
operator's ``dcm-status callbacks``.

A hook is vetted when it is registered (https only in production; its host must resolve to
public addresses only: shared/contracts/callback.py) and again at every delivery, against the
address actually connected to (shared/runtime/egress.py). A callback's signing secret is
returned once, when it is created or rotated, and never shown again.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any, Callable, Mapping

from google.cloud import firestore
from google.cloud.firestore_v1.base_query import FieldFilter

from shared.contracts import callback, timeutil
from shared.contracts.callback import Callback, Filter, Scope, SigningSecret
from shared.contracts.errors import NotFound
from shared.contracts.state import CALLBACKS
from shared.runtime import egress
from shared.runtime import firestore as fs

MAX_LISTED = 1000


class Callbacks:
    def __init__(self, db: firestore.Client, local_mode: bool, hook_timeout: float = 10.0,
                 resolver: egress.Resolver = egress.resolve, post: Callable[..., egress.HookResponse] = egress.post,
                 clock: Callable[[], datetime] = timeutil.now):
        self.db = db
        self.local_mode = local_mode
        self.hook_timeout = hook_timeout
        self.resolver = resolver
        self.post = post
        self.clock = clock

    def _ref(self, callback_id: str) -> Any:
        return self.db.collection(CALLBACKS).document(callback_id)

    def _vet(self, hook: str) -> None:
        egress.vetted_address(hook, self.local_mode, self.resolver)  # InvalidRequest: why it may not be called

    def _new(self, callback_id: str, hook: str, scope: Scope, token: Any, retry_seconds: Any,
             key: str | None = None, where: Filter = Filter()) -> tuple[Callback, str]:
        secret = callback.new_secret()
        cb = Callback(id=callback_id, hook=hook, scope=scope, created_at=timeutil.format(self.clock()),
                      secrets=(SigningSecret(secret),), token=callback.check_token(token), key=key, filter=where,
                      retry_seconds=callback.check_retry_seconds(retry_seconds))
        return cb, secret

    # ---- register --------------------------------------------------------------------------------
    def put_resource(self, key: str, hook: str, token: Any = None,
                     retry_seconds: Any = None) -> tuple[dict[str, Any], str | None] | None:
        """The tracker's ``PUT .../callback?hook=...``: set the resource's one callback (a new hook
        overwrites the old; its secret and stats stay), or with ``hook=none`` delete it (None).
        Returns the callback as shown and, when it was created, its secret."""
        callback_id = callback.resource_callback_id(key)
        if hook == callback.NONE:
            self.remove(callback_id)
            return None
        self._vet(hook)
        with fs.guard("registering a callback"):
            snap = self._ref(callback_id).get(retry=fs.RETRY, timeout=fs.TIMEOUT)
            if snap.exists:
                fields = {"hook": hook, "token": callback.check_token(token), "disabled": None,
                          "retrySeconds": callback.check_retry_seconds(retry_seconds)}
                self._ref(callback_id).update(fields, retry=fs.RETRY, timeout=fs.TIMEOUT)
                return self.show(callback_id), None
            cb, secret = self._new(callback_id, hook, Scope.RESOURCE, token, retry_seconds, key=key)
            self._ref(callback_id).set(cb.to_doc(), retry=fs.RETRY, timeout=fs.TIMEOUT)
        return callback.public(callback_id, cb.to_doc()), secret

    def add(self, hook: str, where: Mapping[str, Any] | None = None, token: Any = None,
            retry_seconds: Any = None) -> tuple[dict[str, Any], str]:
        """A filter callback (every change the filter matches); returns it as shown, and its secret."""
        self._vet(hook)
        cb, secret = self._new(callback.new_callback_id(), hook, Scope.FILTER, token, retry_seconds,
                               where=Filter.of(where))
        with fs.guard("registering a callback"):
            self._ref(cb.id).create(cb.to_doc(), retry=fs.RETRY, timeout=fs.TIMEOUT)
        return callback.public(cb.id, cb.to_doc()), secret

    # ---- read ------------------------------------------------------------------------------------
    def _doc(self, callback_id: str) -> dict[str, Any]:
        if not callback_id or len(callback_id) > 64 or "/" in callback_id:
            raise NotFound(f"no callback {callback_id[:64]!r}", "id")
        with fs.guard("reading a callback"):
            snap = self._ref(callback_id).get(retry=fs.RETRY, timeout=fs.TIMEOUT)
        if not snap.exists:
            raise NotFound(f"no callback {callback_id!r}", "id")
        return snap.to_dict()

    def show(self, callback_id: str) -> dict[str, Any]:
        return callback.public(callback_id, self._doc(callback_id))

    def of_resource(self, key: str) -> dict[str, Any]:
        callback_id = callback.resource_callback_id(key)
        try:
            return self.show(callback_id)
        except NotFound:
            raise NotFound(f"no callback on {key}") from None

    def list(self, scope: Scope | None = None) -> list[dict[str, Any]]:
        query: Any = self.db.collection(CALLBACKS)
        if scope is not None:
            query = query.where(filter=FieldFilter("scope", "==", scope.value))
        with fs.guard("listing callbacks"):
            snaps = list(query.limit(MAX_LISTED).stream(**fs.read_options()))
        return [callback.public(s.id, s.to_dict()) for s in snaps]

    # ---- change ----------------------------------------------------------------------------------
    def remove(self, callback_id: str) -> None:
        self._doc(callback_id)  # NotFound when there is none
        with fs.guard("removing a callback"):
            self._ref(callback_id).delete(retry=fs.RETRY, timeout=fs.TIMEOUT)

    def rotate(self, callback_id: str, grace_seconds: int = callback.DEFAULT_ROTATION_GRACE_SECONDS
               ) -> tuple[dict[str, Any], str]:
        """A new signing secret (returned once); the previous one signs on for ``grace_seconds``."""
        cb, secret = Callback.from_doc(callback_id, self._doc(callback_id)).rotated(self.clock(), grace_seconds)
        with fs.guard("rotating a callback's secret"):
            self._ref(callback_id).update({"secrets": cb.to_doc()["secrets"]}, retry=fs.RETRY, timeout=fs.TIMEOUT)
        return self.show(callback_id), secret

    def enable(self, callback_id: str) -> dict[str, Any]:
        """Call a disabled callback again (after its receiver's 410), its failure count reset."""
        self._doc(callback_id)
        with fs.guard("enabling a callback"):
            self._ref(callback_id).update({"disabled": None, "stats.consecutiveFailures": 0}, retry=fs.RETRY,
                                          timeout=fs.TIMEOUT)
        return self.show(callback_id)

    def test(self, callback_id: str) -> dict[str, Any]:
        """Send the callback a signed test delivery now (``"test": true``, no change); what came of it."""
        cb = Callback.from_doc(callback_id, self._doc(callback_id))
        now = self.clock()
        ping_id, payload = callback.ping(cb.id, cb.token, now)
        headers = callback.signed_headers(cb.signing_secrets(now), ping_id, now, payload)
        sent = self.post(cb.hook, payload, headers, self.hook_timeout, self.local_mode, self.resolver)
        return {"delivered": sent.ok, "status": sent.status, "error": sent.error, "address": sent.address,
                "seconds": round(sent.seconds, 3)}
