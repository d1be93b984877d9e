"""The status API and the dashboard: routes, parameters, answers.

Reads status; registers webhook callbacks (``/v1/callbacks``, ``PUT .../callback``:
shared/api/callbacks.py). Every answer is JSON (the OpenAPI document schemas/openapi/status-api-v1.json
says its shape); every refusal an RFC 9457 problem (``application/problem+json``) with
the parameter at fault. Firestore not answering is a 503 with ``Retry-After``, never
a 500. The dashboard is the static page in ``static/``, served at ``/``.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Mapping
from urllib.parse import quote

import flask
import orjson
from dcm_status_contracts import change_feed, limits, timeutil
from dcm_status_contracts.change_feed import Cursor
from dcm_status_contracts.errors import InvalidRequest, KeysUnavailable, NotFound, TooManyRequests, Transient
from dcm_status_contracts.model import ResourceKey
from dcm_status_contracts.outputs import Redaction
from dcm_status_contracts.schemas import OPENAPI, schemas_dir
from dcm_status_contracts.status_changed import parse_label
from google.api_core import exceptions as gexc
from google.api_core import retry as gretry
from werkzeug.exceptions import MethodNotAllowed
from werkzeug.exceptions import NotFound as NoRoute
from werkzeug.routing import Map, Rule

from shared.api import queries
from shared.api.callbacks import Callbacks
from shared.api.dcm import PATH_PREFIX as DCM_PREFIX
from shared.api.dcm import DcmApi
from shared.api.feed import ChangeFeed, FeedFilter, Live, StreamSlots, stream
from shared.api.callers import Caller, TokenRule, caller_of, check_mutation, rule_for
from shared.api.params import Params
from shared.api.queries import ResourceFilter, Sort
from shared.api.served import Periods, Served, cache_control
from shared.api.reporting import Reporting
from shared.callbacks import hooks, registration
from shared.callbacks.registration import Scope
from shared.runtime import auth, secretbox
from shared.runtime import firestore as fs
from shared.runtime.clients import Runtime
from shared.runtime.entrypoint import problem
from shared.runtime.logs import get_logger
from shared.state.snapshots import SnapshotKind, NotYet, Snapshot
from shared.state.usage.rates import RateCard

log = get_logger("api")

STATIC_DIR = Path(__file__).parent / "static"
STATIC_TYPES = {".html": "text/html; charset=utf-8", ".js": "text/javascript; charset=utf-8",
                ".css": "text/css; charset=utf-8", ".png": "image/png", ".svg": "image/svg+xml"}
OPENAPI_FILE = "status-api-v1.json"
# An API read waits 5 s at most (retried while Firestore is unavailable), then answers 503.
READ_OPTIONS = {"retry": gretry.Retry(initial=0.1, maximum=1.0, multiplier=2.0, timeout=5.0), "timeout": 5.0}

ROUTES = Map([Rule(path, endpoint=endpoint, methods=methods) for path, endpoint, methods in (  # HEAD comes with GET
    ("/", "dashboard", ["GET"]),
    ("/assets/<name>", "static", ["GET"]),  # not /static/: the framework's Flask app keeps that path for itself
    ("/v1/openapi.json", "openapi", ["GET"]),
    ("/v1/resources", "resources", ["GET"]),
    ("/v1/resources/<provider>/<rtype>/<path:rid>/history", "history", ["GET"]),
    ("/v1/resources/<provider>/<rtype>/<path:rid>/callback", "resource_callback", ["GET", "PUT"]),
    ("/v1/resources/<provider>/<rtype>/<path:rid>", "resource", ["GET", "PUT"]),  # PUT: the tracker's ?track_hook=
    ("/v1/changes", "changes", ["GET"]),
    ("/v1/changes/stream", "stream", ["GET"]),
    ("/v1/summary", "summary", ["GET"]),
    ("/v1/providers", "providers", ["GET"]),
    ("/v1/deadletters", "deadletters", ["GET"]),
    ("/v1/stats", "stats", ["GET"]),
    ("/v1/usage", "usage", ["GET"]),
    ("/v1/trends", "trends", ["GET"]),
    ("/v1/callbacks", "callbacks", ["GET", "POST"]),
    ("/v1/callbacks/<cid>", "callback", ["GET", "DELETE"]),
    ("/v1/callbacks/<cid>/<any(rotate, enable, test):action>", "callback_action", ["POST"]),
    (f"{DCM_PREFIX}/<path:rest>", "dcm", ["GET"]),  # the DCM control-plane's read API: shared/api/dcm.py
)], strict_slashes=False, merge_slashes=False)
MAX_BODY_BYTES = 16 * 1024


def json_response(body: Any) -> flask.Response:
    response = flask.Response(orjson.dumps(body, default=str), 200, mimetype="application/json")
    response.headers["Cache-Control"] = "no-store"
    return response


def snapshot_response(snapshot: Snapshot, **more: Any) -> flask.Response:
    """A snapshot of the aggregates (``asOf``, ``everySeconds``, ``outdated``), which a client may keep until
    the next one is expected (docs/api.md "Freshness of the aggregates")."""
    now = timeutil.now()
    response = json_response({**snapshot.answer(now), **more})
    response.headers["Cache-Control"] = cache_control(snapshot, now)
    return response


@dataclass(frozen=True)
class Guards:
    """Who may do what (docs/api.md "Security"): who the caller is (local mode, or the token ``tokens``
    verifies: shared/api/callers.py), the admins, the least grace a rotation keeps, and how many live streams
    an instance and a caller hold open."""

    local_mode: bool = False
    tokens: TokenRule | None = None  # None outside local mode: no token names anyone
    admins: tuple[str, ...] = ()
    min_rotation_grace_seconds: int = 60
    max_streams: int = 100
    max_streams_per_caller: int = 10

    def caller(self, request: flask.Request) -> Caller:
        return caller_of(request.headers, self.local_mode, self.tokens, self.admins)


def token_rule(s: Any) -> TokenRule | None:
    """The check of the api's callers these settings ask for, with Google's cached keys (shared/runtime/auth.py);
    ConfigError if a setting it needs is missing: the api does not start (``check_identity_configured``)."""
    return rule_for(s.local_mode, s.api_iap, s.api_audiences, s.api_iap_audience, lambda: auth.GOOGLE_KEYS.get(),
                    lambda: auth.IAP_KEYS.get())


def check_identity_configured(s: Any) -> None:
    """ConfigError unless the settings say how to verify the api's callers (functions/api/main.py: at start)."""
    token_rule(s)


class Api:
    def __init__(self, db: Any, providers: tuple[str, ...], retention_days: int, settle: float,
                 stream_seconds: float, callbacks: Callbacks | None = None,
                 deadline: Callable[[str], int | None] = lambda provider: None, guards: Guards = Guards(),
                 redaction: Redaction = Redaction.default(), periods: Periods = Periods(),
                 rate_cards: Mapping[str, RateCard] | None = None, search_count_rows: int = 0):
        self.db = db
        # a search's counts from one pass of its rows, up to this many (DCM_SEARCH_COUNT_ROWS; 0: counted)
        self.search_count_rows = search_count_rows
        self.reporting = Reporting(db, rate_cards or {}, READ_OPTIONS, json_response)  # /v1/usage, /v1/trends
        # the sweep's snapshots of the aggregates
        self.served = Served(db, providers, periods, READ_OPTIONS, retention_days)
        self.redaction = redaction  # output values every reader sees as "[redacted]" (docs/security.md)
        self.deadline = deadline
        self.guards = guards
        self.callbacks = callbacks or Callbacks(db, local_mode=False)
        self.slots = StreamSlots(guards.max_streams, guards.max_streams_per_caller)
        self.providers = providers
        self.feed = ChangeFeed(db, retention_days, settle, options=READ_OPTIONS)
        self.live = Live(db)
        self.stream_seconds = stream_seconds
        self.static = {p.name: p.read_bytes() for p in STATIC_DIR.iterdir() if p.suffix in STATIC_TYPES}
        self.openapi = (schemas_dir() / OPENAPI / OPENAPI_FILE).read_bytes()
        self.dcm = DcmApi(db, READ_OPTIONS, json_response, redaction)

    @classmethod
    def build(cls, runtime: Runtime) -> "Api":
        s = runtime.settings
        return cls(runtime.firestore, s.providers, s.ledger_ttl_days, s.feed_settle_seconds, s.stream_seconds,
                   Callbacks(runtime.firestore, s.local_mode, s.hook_timeout_seconds,
                             max_per_caller=s.max_callbacks_per_caller, max_total=s.max_callbacks,
                             keys=secretbox.for_settings(s), hook_ports=s.hook_ports),
                   lambda provider: s.stale_after(provider, ""),
                   Guards(s.local_mode, token_rule(s), s.api_admins, s.min_rotation_grace_seconds, s.max_streams,
                          s.max_streams_per_caller), s.output_redaction,
                   Periods(s.summary_every_seconds, s.stats_every_seconds), s.rate_cards, s.search_count_rows)

    def __call__(self, request: flask.Request) -> flask.Response:
        try:
            endpoint, values = ROUTES.bind_to_environ(request.environ).match()
        except NoRoute:
            return problem(404, "Not found", f"no such path: {request.path[:200]}; see /v1/openapi.json")
        except MethodNotAllowed as exc:
            allowed = ", ".join(sorted(exc.valid_methods or ["GET", "HEAD"]))
            return problem(405, "Method not allowed", f"this path takes {allowed}", headers={"Allow": allowed})
        handler: Callable[..., flask.Response] = getattr(self, f"_{endpoint}")
        try:
            check_mutation(request.method, request.headers, request.host)  # Forbidden: cross-site or no DCM-Request
            return handler(request, **values)
        except TooManyRequests as exc:
            return problem(exc.status, exc.title, exc.detail, exc.parameter, headers={"Retry-After": "10"})
        except InvalidRequest as exc:
            return problem(exc.status, exc.title, exc.detail, exc.parameter)
        except KeysUnavailable:
            return problem(503, "Unavailable", "the caller's token cannot be checked now (Google's signing keys did "
                           "not answer); retry", headers={"Retry-After": "5"})
        except NotYet as exc:
            return problem(503, "Unavailable", f"{exc}; retry in a few seconds", headers={"Retry-After": "2"})
        except (Transient, *fs.TRANSIENT_ERRORS) as exc:
            log.warning("Firestore did not answer", extra={"path": request.path, "error": repr(exc)[:300]})
            return problem(503, "Unavailable", "the state store did not answer in time; retry",
                           headers={"Retry-After": "1"})
        except gexc.InvalidArgument as exc:
            return problem(400, "Bad request", f"the state store refused the query: {exc.message}"[:500])

    # ---- the dashboard ----------------------------------------------------------------------
    def _dashboard(self, request: flask.Request) -> flask.Response:
        return self._static(request, "index.html")

    def _static(self, request: flask.Request, name: str) -> flask.Response:
        body = self.static.get(name)
        if body is None:
            return problem(404, "Not found", f"no such file: {name[:100]}")
        response = flask.Response(body, 200, content_type=STATIC_TYPES[Path(name).suffix])
        response.headers["Cache-Control"] = "no-cache"
        return response

    def _openapi(self, request: flask.Request) -> flask.Response:
        Params(request.args, ())
        return flask.Response(self.openapi, 200, mimetype="application/json")

    # ---- resources --------------------------------------------------------------------------
    def _resources(self, request: flask.Request) -> flask.Response:
        p = Params(request.args, ("provider", "type", "status", "label", "q", "sort", "withCounts",
                                  "pageSize", "pageToken"))
        label = p.text("label")
        where = ResourceFilter(p.text("provider", 64), p.text("type", 64), p.text("status", 64),
                               parse_label(label) if label else None, p.text("q"))
        sort = p.choice("sort", (Sort.KEY, Sort.RECENT), Sort.KEY)
        size = p.integer("pageSize", 50, 1, queries.MAX_PAGE_SIZE)
        with_counts = p.boolean("withCounts")
        counting = queries.list_counts_later(  # while the page is read
            self.db, where, with_counts, self.served.statuses_seen(where.resource_type) if with_counts else None,
            self.search_count_rows, READ_OPTIONS)
        docs, token = queries.resource_page(self.db, where, sort, size, p.text("pageToken", 2048), READ_OPTIONS)
        total, counts = counting.result()
        body: dict[str, Any] = {"resources": [self.redaction.resource(d) for d in docs], "nextPageToken": token,
                                "total": total}
        if counts is not None:
            body["counts"] = counts
        return json_response(body)

    def _resource(self, request: flask.Request, provider: str, rtype: str, rid: str) -> flask.Response:
        key = _key(provider, rtype, rid)
        if request.method == "PUT":  # the tracker's PUT /instances/42?track_hook=URL
            return self._put_callback(request, str(key), TRACKER_PARAMETERS)
        p = Params(request.args, ("at",))
        at = p.text("at", 64)
        if at is not None:
            at = queries.canonical_time(at, "at")
            state = queries.state_at(self.db, key, at, READ_OPTIONS)
            if state is None:
                raise NotFound(f"nothing was known of {key} at {at}")
            return json_response({"key": str(key), "at": at, "state": self.redaction.resource(state)})
        doc = queries.get_resource(self.db, key, READ_OPTIONS)
        if doc is None:
            raise NotFound(f"no resource {key}")
        href = f"/v1/resources/{provider}/{rtype}/{quote(rid, safe='')}/callback"
        return json_response({**self.redaction.resource(doc),
                              "callback": self.callbacks.element_of(str(key), href, self.guards.caller(request))})

    def _history(self, request: flask.Request, provider: str, rtype: str, rid: str) -> flask.Response:
        p = Params(request.args, ("pageSize", "pageToken"))
        key = _key(provider, rtype, rid)
        size = p.integer("pageSize", 50, 1, queries.MAX_PAGE_SIZE)
        entries, token = queries.history_page(self.db, key, size, p.text("pageToken", 2048), READ_OPTIONS)
        if not entries and not p.text("pageToken", 2048) and queries.get_resource(self.db, key, READ_OPTIONS) is None:
            raise NotFound(f"no resource {key}")
        return json_response({"key": str(key), "entries": [self.redaction.resource(e) for e in entries],
                              "nextPageToken": token})

    # ---- the change feed ----------------------------------------------------------------------
    def _feed_filter(self, p: Params) -> FeedFilter:
        return FeedFilter(p.text("provider", 64), p.text("type", 64), p.text("status", 64))

    def _changes(self, request: flask.Request) -> flask.Response:
        p = Params(request.args, ("after", "last", "provider", "type", "status", "limit"))
        after = p.text("after", 512)
        last = p.integer("last", None, 1, 500)
        if after is not None and last is not None:
            raise InvalidRequest("after and last: give one or the other", "last")
        cursor = _cursor(after, "after") if after is not None else None
        return json_response(self.feed.page(cursor, self._feed_filter(p), p.integer("limit", 100, 1, 1000), last))

    def _stream(self, request: flask.Request) -> flask.Response:
        p = Params(request.args, ("after", "provider", "type", "status"))
        parameter = "Last-Event-ID" if request.headers.get("Last-Event-ID") else "after"
        resume = request.headers.get("Last-Event-ID") or p.text("after", 512)
        cursor = _cursor(resume, parameter) if resume else None
        where = self._feed_filter(p)
        if cursor is not None:  # refuse an expired cursor now, as a problem, not inside the stream
            change_feed.check_retained(cursor, self.feed.clock(), self.feed.retention_days, parameter)
        caller = self.guards.caller(request)
        held = self.slots.take(caller.identity or f"address {request.remote_addr}")  # TooManyRequests
        response = flask.Response(held.around(stream(self.feed, self.live, cursor, where, self.stream_seconds)),
                                  200, mimetype="text/event-stream")
        response.headers["Cache-Control"] = "no-store"
        response.headers["X-Accel-Buffering"] = "no"  # proxies must not hold events back
        return response

    # ---- fleet, dead letters, accounting --------------------------------------------------------
    def _summary(self, request: flask.Request) -> flask.Response:
        Params(request.args, ())
        return snapshot_response(self.served.get(SnapshotKind.SUMMARY))

    def _providers(self, request: flask.Request) -> flask.Response:
        Params(request.args, ())
        return json_response({"providers": queries.providers(self.db, self.providers, self.deadline, READ_OPTIONS)})

    def _deadletters(self, request: flask.Request) -> flask.Response:
        p = Params(request.args, ("provider", "reason"))
        found = queries.deadletter_summary(self.db, p.text("provider", 64), p.text("reason", 64), READ_OPTIONS)
        for group in found["groups"]:  # a hook's path and query often carry a credential: not for every reader
            group["message"] = hooks.redact_urls(group["message"])
        return json_response(found)

    def _stats(self, request: flask.Request) -> flask.Response:
        Params(request.args, ())
        return snapshot_response(self.served.get(SnapshotKind.STATS), windowDays=self.feed.retention_days)

    # ---- usage and trends (issue 40): shared/api/reporting.py ----------------------------------------
    def _usage(self, request: flask.Request) -> flask.Response:
        return self.reporting.usage(request)

    def _trends(self, request: flask.Request) -> flask.Response:
        return self.reporting.trends(request)

    # ---- the DCM control-plane's read API --------------------------------------------------------
    def _dcm(self, request: flask.Request, rest: str) -> flask.Response:
        return self.dcm(request)

    # ---- webhook callbacks ----------------------------------------------------------------------
    def _resource_callback(self, request: flask.Request, provider: str, rtype: str, rid: str) -> flask.Response:
        key = str(_key(provider, rtype, rid))
        if request.method == "GET":
            Params(request.args, ())
            return json_response({"callback": self.callbacks.of_resource(key, self.guards.caller(request))})
        return self._put_callback(request, key, HOOK_PARAMETERS)

    def _put_callback(self, request: flask.Request, key: str, allowed: tuple[str, ...]) -> flask.Response:
        """Set or delete (``none``) a resource's callback: ``?hook=URL&token=`` or the tracker's own spelling
        ``?track_hook=URL&track_token=``, as ``allowed``."""
        p = Params(request.args, allowed)
        hook, token = _hook_and_token(p, "hook" in allowed)
        retry = p.integer("retrySeconds", None, 1, registration.MAX_RETRY_SECONDS)
        done = self.callbacks.register_resource(key, hook, token, retry, self.guards.caller(request))
        if done is None:
            return flask.Response(status=204)
        shown, secret, created = done
        return _registered(shown, secret, created)

    def _callbacks(self, request: flask.Request) -> flask.Response:
        if request.method == "GET":
            p = Params(request.args, ("scope",))
            scope = p.choice("scope", ("any", *(s.value for s in Scope)), "any")
            return json_response({"callbacks": self.callbacks.list(None if scope == "any" else Scope(scope),
                                                                   self.guards.caller(request))})
        Params(request.args, ())
        body = _json_body(request, ("hook", "token", "filter", "retrySeconds"))
        hook = body.get("hook")
        if not isinstance(hook, str):
            raise InvalidRequest("hook: required, the URL to POST changes to", "hook")
        shown, secret = self.callbacks.add(hook, body.get("filter"), body.get("token"), body.get("retrySeconds"),
                                           self.guards.caller(request))
        return _registered(shown, secret, created=True)

    def _callback(self, request: flask.Request, cid: str) -> flask.Response:
        Params(request.args, ())
        caller = self.guards.caller(request)
        if request.method == "DELETE":
            self.callbacks.remove(cid, caller)
            return flask.Response(status=204)
        return json_response({"callback": self.callbacks.show(cid, caller)})

    def _callback_action(self, request: flask.Request, cid: str, action: str) -> flask.Response:
        caller = self.guards.caller(request)
        if action == "rotate":
            p = Params(request.args, ("graceSeconds",))
            least = self.guards.min_rotation_grace_seconds
            grace = p.integer("graceSeconds", max(registration.DEFAULT_ROTATION_GRACE_SECONDS, least), least,
                              registration.MAX_RETRY_SECONDS)
            shown, secret = self.callbacks.rotate(cid, grace, caller)
            return json_response({"callback": shown, "secret": secret})
        Params(request.args, ())
        if action == "enable":
            return json_response({"callback": self.callbacks.enable(cid, caller)})
        return json_response(self.callbacks.test(cid, caller))


HOOK_PARAMETERS = ("hook", "token", "track_hook", "track_token", "retrySeconds")  # PUT .../callback
TRACKER_PARAMETERS = ("track_hook", "track_token", "retrySeconds")  # PUT of the resource: the tracker's spelling only


def _hook_and_token(p: Params, ours_too: bool) -> tuple[str, str | None]:
    """A resource callback's hook and token, as the tracker's ``track_hook``/``track_token`` or (``ours_too``)
    ``hook``/``token``: one spelling of each, not both."""
    found = []
    for name in ("hook", "token"):
        ours, trackers = p.text(name, LIMITS[name]), p.text(f"track_{name}", LIMITS[name])
        if ours is not None and trackers is not None:
            raise InvalidRequest(f"{name} and track_{name}: give one or the other", f"track_{name}")
        found.append(ours if ours is not None else trackers)
    if found[0] is None:
        name = "hook" if ours_too else "track_hook"
        raise InvalidRequest(f"{'hook (or track_hook)' if ours_too else name}: required, the URL to POST changes to, "
                             "or none to delete the callback", name)
    return found[0], found[1]


LIMITS = {"hook": hooks.MAX_HOOK_CHARS, "token": registration.MAX_TOKEN_CHARS}


def _registered(shown: dict[str, Any], secret: str | None, created: bool) -> flask.Response:
    """201 with the secret (shown this once) for a new callback; 200 for an updated one, with its new
    secret when its hook changed."""
    response = json_response({"callback": shown, **({"secret": secret} if secret is not None else {})})
    if created:
        response.status_code = 201
        response.headers["Location"] = f"/v1/callbacks/{shown['id']}"
    return response


def _cursor(text: str, parameter: str) -> Cursor:
    """A change-feed cursor the API handed out (its entry id names a document), or InvalidRequest."""
    cursor = Cursor.decode(text, parameter)
    if cursor.entry_id != change_feed.END and not fs.is_document_id(cursor.entry_id):
        raise InvalidRequest(f"{parameter}: not a cursor of this feed", parameter)
    return cursor


def _json_body(request: flask.Request, allowed: tuple[str, ...]) -> dict[str, Any]:
    """A request's JSON object body, checked: JSON, an object, known fields only, not too big."""
    if request.mimetype != "application/json":
        raise InvalidRequest("the body must be JSON (Content-Type: application/json)", "body")
    if (request.content_length or 0) > MAX_BODY_BYTES:  # refused before it is read
        raise InvalidRequest(f"the body is over {MAX_BODY_BYTES} bytes", "body")
    raw = request.get_data()
    try:
        body = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidRequest(f"the body is not JSON: {exc}", "body") from exc
    if not isinstance(body, dict):
        raise InvalidRequest("the body must be a JSON object", "body")
    unknown = sorted(set(body) - set(allowed))
    if unknown:
        raise InvalidRequest(f"unknown field {unknown[0][:64]!r}; the body takes: {', '.join(allowed)}", unknown[0][:64])
    return body


def unrouted(exc: Exception) -> flask.Response:
    """The framework's own 404 (a path its router refuses before the function sees it), as a problem."""
    return problem(404, "Not found", "no such path; see /v1/openapi.json")


def _key(provider: str, rtype: str, rid: str) -> ResourceKey:
    key = ResourceKey(provider, rtype, rid)
    if not limits.document_id_fits(key.doc_id):
        raise InvalidRequest(f"no resource key is that long ({len(key.doc_id.encode())} bytes as a document id; "
                             f"at most {limits.FIRESTORE_MAX_DOCUMENT_ID_BYTES})", "id")
    return key
