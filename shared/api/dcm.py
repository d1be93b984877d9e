"""The DCM control-plane's resource-manager read API, served from the observed state.

What the DCM CLI (``dcm sp resource list|get``, dcm-project/cli ``internal/commands/sp_resource.go``) and
UI read from the control-plane (``api/sp/v1alpha1/resource_manager/openapi.yaml`` in
dcm-project/control-plane; vendored in ``schemas/upstream/control-plane/``), answered from the
``resources`` this platform stores (docs/api.md, "DCM compatibility"):

- ``GET /api/v1alpha1/service-type-instances``: ``service_type``, ``agent_name`` (or the older
  ``provider``), ``show_deleted``, ``max_page_size`` (1-100), ``page_token``;
- ``GET /api/v1alpha1/service-type-instances/{instanceId}``: ``show_deleted``;
- ``GET /api/v1alpha1/health``: ``{status, path, checks}``.

The instance id is the resource's own id (what the provider reports as ``data.id``: DCM's instance
id, which the control-plane's status consumer matches on). Refusals are the api's RFC 7807 problems.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass
from typing import Any, Callable, Mapping
from urllib.parse import quote

import flask
from dcm_status_contracts.errors import Conflict, InvalidRequest, NotFound, Transient
from dcm_status_contracts.model import CommonStatus, ResourceKey
from dcm_status_contracts.outputs import Redaction
from google.api_core import exceptions as gexc
from google.cloud.firestore_v1.base_query import FieldFilter
from werkzeug.exceptions import NotFound as NoRoute
from werkzeug.routing import Map, Rule

from shared.api import queries
from shared.api.params import Params
from shared.api.queries import ResourceFilter, Sort
from shared.runtime import firestore as fs
from shared.state.documents import RESOURCES

PATH_PREFIX = "/api/v1alpha1"
HEALTH_PATH = f"{PATH_PREFIX}/health"
INSTANCES = "service-type-instances"
MAX_PAGE_SIZE = 100  # the upstream document's maximum (and default)
MAX_ID_CHARS = 1024
MAX_FILTER_CHARS = 256
FILL_ROUNDS = 5  # pages read at most to fill one page when deleted instances are left out
HEALTH_TIMEOUT = 1.0  # seconds: the upstream checker's cap per dependency
DELETED = CommonStatus.DELETED.value

ROUTES = Map([Rule(f"{PATH_PREFIX}/{INSTANCES}", endpoint="instances", methods=["GET"]),
              Rule(f"{PATH_PREFIX}/{INSTANCES}/<path:instance_id>", endpoint="instance", methods=["GET"]),
              Rule(HEALTH_PATH, endpoint="health", methods=["GET"])], strict_slashes=False, merge_slashes=False)


class StatusCase(enum.Enum):
    """How ``status`` is served. ``lower`` (the default): as the current control-plane stores it, the
    provider's own value trimmed and lower-cased, whatever it is (``running``, ``custom_state_12345``:
    dcm-project/control-plane ``internal/sp/consumer/consumer.go``). ``upper``: this platform's status on
    its type's vocabulary (``RUNNING``; ``UNKNOWN`` for a value outside it), what the DCM CLI at b80a859
    and the upstream e2e suite up to 3dcc40f expected."""

    LOWER = "lower"
    UPPER = "upper"

    def spell(self, doc: Mapping[str, Any]) -> str:
        if self is StatusCase.UPPER:
            return doc["status"].upper()
        raw = doc.get("rawStatus")
        return (raw if isinstance(raw, str) else doc["status"]).strip().lower()


class DcmHealth(enum.Enum):
    OK = "ok"
    UNHEALTHY = "unhealthy"


class Check(enum.Enum):
    OK = "ok"
    UNAVAILABLE = "unavailable"


@dataclass(frozen=True)
class InstanceQuery:
    """The checked parameters of a list or a get."""

    agent_name: str | None = None
    service_type: str | None = None
    show_deleted: bool = False
    case: StatusCase = StatusCase.LOWER


# ---- parameters ----------------------------------------------------------------------------------
class DcmParams(Params):
    """The query parameters of one DCM request, checked as the api's are; booleans read as upstream reads them."""

    def boolean(self, name: str) -> bool:
        """As the upstream server (Go's strconv.ParseBool) reads one."""
        value = self.args.get(name)
        if value is None:
            return False
        if value not in ("true", "false", "True", "False", "TRUE", "FALSE", "1", "0", "t", "f", "T", "F"):
            raise InvalidRequest(f"{name}: expected true or false, got {value[:40]!r}", name)
        return value in ("true", "True", "TRUE", "1", "t", "T")

    def optional(self, name: str, max_len: int = MAX_FILTER_CHARS) -> str | None:
        """A filter or a page token; empty or blank is none, as upstream reads it (``strings.TrimSpace(v) != ""``)."""
        value = self.args.get(name)
        return None if value is None or not value.strip() else self.text(name, max_len)

    def page_size(self) -> int:
        return self.integer("max_page_size", MAX_PAGE_SIZE, 1, MAX_PAGE_SIZE)

    def case(self) -> StatusCase:
        return StatusCase(self.choice("status_case", tuple(c.value for c in StatusCase), StatusCase.LOWER.value))

    def query(self) -> InstanceQuery:
        agent, provider = self.optional("agent_name"), self.optional("provider")
        if agent is not None and provider is not None and agent != provider:
            raise InvalidRequest("agent_name and provider name the same thing (provider is its older name): "
                                 "give one, or both alike", "provider")
        service_type = self.optional("service_type")
        return InstanceQuery(agent or provider, service_type, self.boolean("show_deleted"), self.case())


LIST_PARAMETERS = ("service_type", "agent_name", "provider", "show_deleted", "max_page_size", "page_token",
                   "status_case")
GET_PARAMETERS = ("show_deleted", "agent_name", "provider", "service_type", "status_case")


# ---- the shape ------------------------------------------------------------------------------------
def instance_of(doc: Mapping[str, Any], case: StatusCase = StatusCase.LOWER) -> dict[str, Any]:
    """A stored resource as a DCM ``ServiceTypeInstance`` (upstream spelling), with the platform's own
    fields beside (``key``, ``provider_name``, ``service_type``, ``status_message``) and, when the resource
    has them, ``output_spec`` and ``outputs``."""
    rid = doc["resourceId"]
    instance: dict[str, Any] = {
        "id": rid, "path": f"{INSTANCES}/{quote(rid, safe='')}", "agent_name": doc["provider"],
        "provider_name": doc["provider"], "service_type": doc["resourceType"], "status": case.spell(doc),
        "spec": dict(doc.get("resourceSpecific") or {}),
        "create_time": doc.get("createdAt") or doc.get("observedAt"),
        "update_time": doc.get("updatedAt") or doc.get("observedAt"),
        "key": doc.get("key") or str(ResourceKey(doc["provider"], doc["resourceType"], rid)),
    }
    if doc["status"] == DELETED:
        instance["deletion_status"] = DELETED  # what the control-plane's store writes (its document's enum lacks it)
    if doc.get("message"):
        instance["status_message"] = doc["message"]
    for name in ("output_spec", "outputs"):
        if isinstance(doc.get(name), Mapping):
            instance[name] = dict(doc[name])
    return {k: v for k, v in instance.items() if v is not None}


def _utf8(text: str) -> bool:
    try:
        text.encode()
    except UnicodeEncodeError:  # a lone surrogate: no Firestore string
        return False
    return True


def _shown(doc: Mapping[str, Any], show_deleted: bool) -> bool:
    return show_deleted or doc.get("status") != DELETED


# ---- reads -----------------------------------------------------------------------------------------
def instance_page(db: Any, query: InstanceQuery, size: int, token: str | None, options: Mapping[str, Any]
                  ) -> tuple[list[dict[str, Any]], str | None]:
    """A page of instances in key order and the next page's token; deleted ones left out unless asked
    for (a page read short of them is filled from the next, ``FILL_ROUNDS`` reads at most: a page can
    hold fewer than ``size`` and still have a next one)."""
    where = ResourceFilter(query.agent_name, query.service_type)
    kept: list[dict[str, Any]] = []
    for _ in range(FILL_ROUNDS):
        try:
            docs, token = queries.resource_page(db, where, Sort.KEY, size - len(kept), token, options)
        except InvalidRequest as exc:
            raise InvalidRequest("page_token: not a page token of this list", "page_token") from exc
        kept += [d for d in docs if _shown(d, query.show_deleted)]
        if token is None or len(kept) >= size:
            break
    return [instance_of(d, query.case) for d in kept], token


def find_instance(db: Any, instance_id: str, query: InstanceQuery, options: Mapping[str, Any]) -> dict[str, Any]:
    """The resource whose own id is ``instance_id`` (narrowed by ``agent_name``, ``service_type``), as an
    instance; NotFound, or a 409 when the id names resources of several providers or types."""
    where = ResourceFilter(query.agent_name, query.service_type).query(db)
    found = where.where(filter=FieldFilter("resourceId", "==", instance_id)).limit(2).select(
        ["provider", "resourceType", "resourceId"]).stream(**options)
    keys = [ResourceKey(d["provider"], d["resourceType"], d["resourceId"]) for s in found for d in [s.to_dict()]]
    if len(keys) > 1:
        raise Conflict(f"instance {instance_id[:100]!r} names resources of several providers or types "
                        f"({keys[0]}, {keys[1]}, ...): add agent_name= and service_type=", "instanceId")
    doc = queries.get_resource(db, keys[0], options) if keys else None
    if doc is None:
        raise NotFound(f"no instance {instance_id[:100]!r}", "instanceId")
    if not _shown(doc, query.show_deleted):
        raise NotFound(f"instance {instance_id[:100]!r} is deleted (show_deleted=true shows it)", "instanceId")
    return instance_of(doc, query.case)


def health_of(db: Any) -> tuple[DcmHealth, dict[str, str]]:
    """Whether the state store answers (one point read of a document that need not exist, within 1 s)."""
    try:
        db.collection(RESOURCES).document("health").get(timeout=HEALTH_TIMEOUT, retry=None)
    except (Transient, gexc.GoogleAPICallError, *fs.TRANSIENT_ERRORS):
        return DcmHealth.UNHEALTHY, {"firestore": Check.UNAVAILABLE.value}
    return DcmHealth.OK, {"firestore": Check.OK.value}


# ---- the routes ------------------------------------------------------------------------------------
class DcmApi:
    """The DCM routes under ``/api/v1alpha1``: ``__call__`` answers a request or raises the api's
    errors (InvalidRequest and its kin, Transient), which the api turns into problems."""

    def __init__(self, db: Any, options: Mapping[str, Any], respond: Callable[[Any], flask.Response],
                 redaction: Redaction):
        self.db = db
        self.options = options
        self.respond = respond  # the api's JSON answer
        self.redaction = redaction  # output values every reader sees as "[redacted]", as on /v1

    def __call__(self, request: flask.Request) -> flask.Response:
        try:
            endpoint, values = ROUTES.bind_to_environ(request.environ).match()
        except NoRoute:
            raise NotFound(f"no such path: {request.path[:200]}") from None
        return getattr(self, f"_{endpoint}")(request, **values)

    def _instances(self, request: flask.Request) -> flask.Response:
        p = DcmParams(request.args, LIST_PARAMETERS)
        query, size = p.query(), p.page_size()
        found, token = instance_page(self.db, query, size, p.optional("page_token", 2048), self.options)
        return self.respond({"instances": [self.redaction.resource(i) for i in found],
                             **({"next_page_token": token} if token else {})})

    def _instance(self, request: flask.Request, instance_id: str) -> flask.Response:
        p = DcmParams(request.args, GET_PARAMETERS)
        if len(instance_id) > MAX_ID_CHARS or not _utf8(instance_id):
            raise InvalidRequest(f"instanceId: expected 1 to {MAX_ID_CHARS} characters", "instanceId")
        return self.respond(self.redaction.resource(find_instance(self.db, instance_id, p.query(), self.options)))

    def _health(self, request: flask.Request) -> flask.Response:
        DcmParams(request.args, ())
        health, checks = health_of(self.db)
        response = self.respond({"status": health.value, "path": HEALTH_PATH, "checks": checks})
        if health is DcmHealth.UNHEALTHY:
            response.status_code = 503
        return response
