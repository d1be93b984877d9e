"""The schema registry: every JSON Schema the contracts know (the repository's ``schemas/``, shipped as
package data in a wheel or a function's zip), compiled once on first use.

Hot path: fastjsonschema (draft-07) validates. When it says no, jsonschema
explains: every error with its JSON pointer path, the rule that failed and the
offending value, so the dead letter says exactly what to fix.
"""

from __future__ import annotations

import importlib.resources
import os
import re
from dataclasses import dataclass
from importlib.resources.abc import Traversable
from pathlib import Path
from typing import TYPE_CHECKING, Any, Callable, Collection, Iterator, Mapping

import fastjsonschema
import orjson

from .diff import escape

if TYPE_CHECKING:
    import jsonschema

SCHEMA_URI_PREFIX = "https://schemas.dcm.org/"
ENVELOPE_URI = SCHEMA_URI_PREFIX + "envelope/cloudevent-v1.json"
VOCABULARIES = "vocabularies"  # folder of provider vocabularies (not schemas)
OPENAPI = "openapi"  # folder of the API's OpenAPI documents (not event schemas)
SAMPLES = "samples"  # folder of golden samples (the repository's, never shipped)
CHECKOUT_SCHEMAS = Path(__file__).resolve().parent.parent.parent / "schemas"  # shared/contracts/../../schemas


def schemas_dir() -> Traversable:
    """Where the JSON Schemas are: ``$DCM_SCHEMAS_DIR`` (a test's edited copy), else this package's data
    (``dcm_status_contracts/schemas/`` in a wheel or a function's zip), else the source checkout's
    top-level ``schemas/`` (an editable install)."""
    override = os.environ.get("DCM_SCHEMAS_DIR")
    if override:
        return Path(override)
    shipped = importlib.resources.files(__package__) / "schemas"
    return shipped if shipped.is_dir() else CHECKOUT_SCHEMAS


def json_files(folder: Traversable, skip: Collection[str] = ()) -> Iterator[Traversable]:
    """The ``*.json`` under ``folder``, sorted by path, leaving out the subfolders named in ``skip``."""
    if not folder.is_dir():
        return
    for entry in sorted(folder.iterdir(), key=lambda e: e.name):
        if entry.is_dir():
            if entry.name not in skip:
                yield from json_files(entry, skip)
        elif entry.name.endswith(".json"):
            yield entry


@dataclass(frozen=True)
class Violation:
    """One reason a document does not match its schema."""

    path: str  # JSON pointer into the validated document
    rule: str  # the keyword that failed (required, enum, type, format...)
    message: str
    value: Any

    def to_dict(self) -> dict[str, Any]:
        return {"path": self.path, "rule": self.rule, "message": self.message, "value": self.value}


@dataclass(frozen=True)
class CompiledSchema:
    uri: str
    schema: Mapping[str, Any]
    check: Callable[[Any], Any]  # fastjsonschema: raises JsonSchemaException
    explainer: jsonschema.protocols.Validator

    def is_valid(self, document: Any) -> bool:
        try:
            self.check(document)
            return True
        except fastjsonschema.JsonSchemaException:
            return False

    def first_violation(self, document: Any, prefix: str = "") -> Violation | None:
        """The violation the compiled validator stops at (None when valid): the cheap answer for a hot
        path; ``violations`` lists them all."""
        try:
            self.check(document)
            return None
        except fastjsonschema.JsonSchemaValueException as exc:
            parts = [escape(str(p)) for p in (exc.path or [])[1:]]  # path[0] is the document ("data")
            value = _short(exc.value)
            if exc.rule == "required" and isinstance(exc.value, dict):  # point at the missing member itself
                missing = next((m for m in exc.rule_definition or () if m not in exc.value), None)
                if missing is not None:
                    parts.append(escape(str(missing)))
                value = None
            message = exc.message[len(exc.name):].strip() if exc.name and exc.message.startswith(exc.name) \
                else exc.message
            pointer = prefix + "".join(f"/{p}" for p in parts)
            return Violation(pointer or "/", str(exc.rule), _short(message), value)
        except fastjsonschema.JsonSchemaException as exc:  # not a value error: let the full walk say
            found = self.violations(document, prefix)
            return found[0] if found else Violation(prefix or "/", "schema", _short(str(exc)), None)

    def violations(self, document: Any, prefix: str = "") -> list[Violation]:
        """Every violation, most specific first (empty when valid)."""
        from jsonschema.exceptions import relevance

        found = []
        for err in sorted(self.explainer.iter_errors(document), key=relevance):
            for leaf in _leaves(err):
                parts = [escape(p) for p in leaf.absolute_path]
                value = _short(leaf.instance)
                if leaf.validator == "required":  # point at the missing member itself
                    parts.append(next((escape(p) for p in leaf.validator_value
                                       if p not in leaf.instance and repr(p) in leaf.message), ""))
                    value = None
                pointer = prefix + "".join(f"/{p}" for p in parts)
                found.append(Violation(pointer or "/", str(leaf.validator), _short(leaf.message), value))
        return found


@dataclass(frozen=True)
class StatusSchema:
    """A resource type's status schema at one version, with its status enum."""

    compiled: CompiledSchema
    resource_type: str
    version: int
    statuses: tuple[str, ...]
    aliases: Mapping[str, str]

    @property
    def uri(self) -> str:
        return self.compiled.uri


_SEPARATORS = re.compile(r"[\s\-]+")


def status_token(raw: str) -> str:
    """A status as compared: upper case, separators as '_' ("in-use" -> "IN_USE")."""
    return _SEPARATORS.sub("_", raw.strip()).upper()


@dataclass(frozen=True)
class Vocabulary:
    """A provider's own status words per resource type, mapped onto the generic statuses
    (``schemas/vocabularies/{name}.json``; a topology provider profile names the one it speaks)."""

    name: str
    mapping: Mapping[str, Mapping[str, str]]  # resource type -> status token -> generic status

    def translate(self, resource_type: str, raw: str) -> str | None:
        return self.mapping.get(resource_type, {}).get(status_token(raw))


def _leaves(err: jsonschema.ValidationError):
    """allOf/anyOf errors hide the real causes in their context: surface them."""
    from jsonschema.exceptions import relevance

    if err.context:
        for sub in sorted(err.context, key=relevance):
            yield from _leaves(sub)
    else:
        yield err



def _short(value: Any) -> Any:
    if isinstance(value, (dict, list)):
        text = orjson.dumps(value).decode()
        return text if len(text) <= 200 else text[:197] + "..."
    if isinstance(value, str) and len(value) > 200:
        return value[:197] + "..."
    return value


class SchemaRegistry:
    """Loads and compiles every schema once; looks status schemas up by URI or type."""

    def __init__(self, root: Traversable):
        import jsonschema  # the explainer: loaded with the registry, not with every importer of this module
        from referencing import Registry, Resource
        from referencing.jsonschema import DRAFT7

        self.root = root
        raw: dict[str, dict[str, Any]] = {}
        for path in json_files(root, skip=(SAMPLES, VOCABULARIES, OPENAPI)):
            doc = orjson.loads(path.read_bytes())
            uri = doc.get("$id")
            if not uri:
                raise ValueError(f"schema {path} has no $id")
            raw[uri] = doc
        self._raw = raw
        registry = Registry().with_resources(
            (uri, Resource.from_contents(doc, default_specification=DRAFT7)) for uri, doc in raw.items()
        )
        handlers = {"https": lambda uri: raw[uri]}
        self.compiled: dict[str, CompiledSchema] = {}
        for uri, doc in raw.items():
            check = fastjsonschema.compile(doc, handlers=handlers, use_formats=True)
            explainer = jsonschema.Draft7Validator(
                doc, registry=registry, format_checker=jsonschema.Draft7Validator.FORMAT_CHECKER)
            self.compiled[uri] = CompiledSchema(uri, doc, check, explainer)
        self.status: dict[str, StatusSchema] = {}
        for uri, doc in raw.items():
            meta = doc.get("x-dcm")
            if meta:
                self.status[uri] = StatusSchema(
                    compiled=self.compiled[uri],
                    resource_type=meta["resourceType"],
                    version=int(meta["version"]),
                    statuses=tuple(meta["statuses"]),
                    aliases=dict(meta.get("aliases", {})),
                )
        self.current: dict[str, StatusSchema] = {}
        for s in self.status.values():
            if s.resource_type not in self.current or s.version > self.current[s.resource_type].version:
                self.current[s.resource_type] = s
        self.vocabularies: dict[str, Vocabulary] = {}
        for path in json_files(root / VOCABULARIES):
            doc = orjson.loads(path.read_bytes())
            self.vocabularies[doc["vocabulary"]] = Vocabulary(doc["vocabulary"], {
                rtype: {status_token(raw): status for raw, status in table.items()}
                for rtype, table in doc["resourceTypes"].items()})

    @property
    def resource_types(self) -> tuple[str, ...]:
        return tuple(sorted(self.current))

    def get(self, uri: str) -> CompiledSchema:
        return self.compiled[uri]

    def status_schema(self, uri: str) -> StatusSchema | None:
        return self.status.get(uri)


_REGISTRY: SchemaRegistry | None = None


def registry() -> SchemaRegistry:
    """The process-wide registry (compiled on first use, then kept)."""
    global _REGISTRY
    if _REGISTRY is None:
        _REGISTRY = SchemaRegistry(schemas_dir())
    return _REGISTRY
