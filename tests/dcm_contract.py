"""The upstream contract of the DCM-compatible read API (shared/api/dcm.py), for the functional and e2e
tests: both vendored control-plane OpenAPI documents (schemas/upstream/README.md) and the health answer.

- dcm-project/control-plane ``api/sp/v1alpha1/resource_manager/openapi.yaml`` at ``1c577bc`` (``agent_name``)
  and at ``74967d8`` (``provider`` / ``provider_name``, what the DCM CLI at ``b80a859`` sends and reads);
- the health answer from dcm-project/control-plane ``internal/app/health.go`` at ``32ff3e8`` (no document).

One deviation is served on purpose (docs/api.md, "DCM compatibility"): ``deletion_status`` is ``DELETED``
for a deleted resource, as the control-plane's store writes it (``internal/sp/store/resource_manager/
service_instance.go`` at ``1c577bc``), though both documents' enums lack it: an answer holding a deleted
instance is validated against the documents with that one value added, every other one against the
documents as they are.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import orjson
import yaml
from openapi_core import Config, OpenAPI
from openapi_core.protocols import Request, Response

REPO = Path(__file__).resolve().parent.parent
UPSTREAM = REPO / "schemas" / "upstream" / "control-plane" / "resource_manager"
DOCUMENTS = {"1c577bc": UPSTREAM / "openapi.yaml", "74967d8": UPSTREAM / "openapi-74967d8.yaml"}
CONFIG = Config(extra_media_type_deserializers={"application/problem+json": orjson.loads})
HEALTH_PATH = "/api/v1alpha1/health"
# internal/app/health.go at 32ff3e8: healthResponse{Status, Path, Checks map[string]string `omitempty`}
HEALTH = {"type": "object", "required": ["status", "path"],
          "properties": {"status": {"enum": ["ok", "unhealthy"]}, "path": {"const": HEALTH_PATH},
                         "checks": {"type": "object", "additionalProperties": {"enum": ["ok", "unavailable"]}}}}


def document(path: Path, deleted_too: bool) -> OpenAPI:
    spec = yaml.safe_load(path.read_text())
    if deleted_too:
        status = spec["components"]["schemas"]["ServiceTypeInstance"]["properties"]["deletion_status"]
        status["enum"] = [*status["enum"], "DELETED"]
    return OpenAPI.from_dict(spec, config=CONFIG)


AS_WRITTEN = {name: document(path, False) for name, path in DOCUMENTS.items()}
WITH_DELETED = {name: document(path, True) for name, path in DOCUMENTS.items()}


def instances_in(body: Any) -> list[dict[str, Any]]:
    if not isinstance(body, dict):
        return []
    return body.get("instances", []) if "instances" in body else [body] if "spec" in body else []


def check(path: str, status: int, body: Any, request: Request, response: Response) -> None:
    """An answer of the DCM routes, against the upstream contract; a refusal a problem the DCM CLI reads as
    one (``handleErrorResponse``: a non-empty ``type``)."""
    if path.startswith(HEALTH_PATH):
        jsonschema.validate(body, HEALTH)
        return
    deleted = any(i.get("deletion_status") for i in instances_in(body))
    for openapi in (WITH_DELETED if deleted else AS_WRITTEN).values():
        openapi.validate_response(request, response)
    if status >= 400:
        assert body["type"] and body["status"] == status and body["detail"]
