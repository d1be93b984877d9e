"""The Google provider's schema, offline: read from the CDK for Terraform bindings generated from it.

``cdktf-cdktf-provider-google`` (PyPI; the ``schema`` extra of pyproject.toml) is generated from one
hashicorp/google release. Importing it needs node (the jsii runtime), so it is never imported: its jsii
assembly (``_jsii/provider-google@VERSION.jsii.tgz``, member ``package/.jsii``, JSON) is read straight out
of the installed files, found through the distribution's metadata (``importlib.metadata``), which imports
nothing. Each resource, data source and the provider itself is a class whose docs link its registry page
(``.../hashicorp/google/6.50.0/docs/resources/pubsub_subscription google_pubsub_subscription``); its
initializer's ``config`` is a struct whose properties are the arguments and blocks (camelCase, each docs
linking the HCL name as ``#ack_deadline_seconds``), ``optional`` unless required; a block's type names
another struct, nested the same way.

What the assembly does not carry: the schema's ``deprecated`` flag (cdktf writes no jsii ``@deprecated``:
0 of 19,517 types). A deprecated argument is recognised by its description, which the provider words as
"Deprecated. ...", "**DEPRECATED** ...", "... is deprecated ..." or "Field will be deprecated ...".
"""

from __future__ import annotations

import io
import re
import tarfile
from dataclasses import dataclass, field
from functools import cached_property
from importlib import metadata
from pathlib import Path
from typing import Any, Iterator, Mapping

import orjson

DISTRIBUTION = "cdktf-cdktf-provider-google"
ASSEMBLY_MEMBER = "package/.jsii"
_REGISTRY = re.compile(r"registry\.terraform\.io/providers/hashicorp/google/(?P<version>[0-9.]+)/docs"
                       r"(?:/(?P<kind>resources|data-sources)/\w+)? (?P<name>google(?:_\w+)?)\}")
_ANCHOR = re.compile(r"registry\.terraform\.io/providers/hashicorp/google/[0-9.]+/docs[^#\s]*#(\w+) ")
_DEPRECATED = re.compile(r"(^|[.!]\s+|\*\*)deprecated\b[.:*]|\b(is|are|has been|was|will be|now) deprecated\b",
                         re.IGNORECASE)


class SchemaPackageMissing(RuntimeError):
    """The schema package is not installed in this environment."""


@dataclass(frozen=True)
class Argument:
    """One argument or block of a resource (or of a block)."""

    name: str  # as written in HCL
    required: bool
    deprecated: bool
    block: str | None  # the struct type of a block; None for a plain argument


@dataclass(frozen=True)
class Block:
    """The arguments and nested blocks one resource, data source or block accepts."""

    fqn: str
    arguments: Mapping[str, Argument] = field(default_factory=dict)

    def required(self) -> set[str]:
        return {a.name for a in self.arguments.values() if a.required}


def assembly_path() -> Path:
    """Where the installed package keeps its jsii assembly (nothing is imported)."""
    try:
        dist = metadata.distribution(DISTRIBUTION)
    except metadata.PackageNotFoundError as exc:
        raise SchemaPackageMissing(f"{DISTRIBUTION} is not installed: run `make install` (pyproject.toml's "
                                   "`schema` extra)") from exc
    member = next((f for f in dist.files or () if str(f).endswith(".jsii.tgz")), None)
    if member is None:
        raise SchemaPackageMissing(f"{DISTRIBUTION} {dist.version} holds no jsii assembly")
    return Path(str(dist.locate_file(member)))


def package_version() -> str:
    return metadata.version(DISTRIBUTION)


def _read_assembly(path: Path) -> dict[str, Any]:
    with tarfile.open(path) as archive:
        member = archive.extractfile(ASSEMBLY_MEMBER)
        assert member is not None, f"{path} has no {ASSEMBLY_MEMBER}"
        return orjson.loads(io.BufferedReader(member).read())


def _docs_text(docs: Mapping[str, Any]) -> str:
    return f"{docs.get('summary', '')}\n{docs.get('remarks', '')}"


def _snake(camel: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", camel).lower()


def _struct_in(type_ref: Any, types: Mapping[str, Any]) -> str | None:
    """The provider struct a property's type names (a block), wherever it sits in unions and lists."""
    if isinstance(type_ref, dict):
        fqn = type_ref.get("fqn")
        if fqn and types.get(fqn, {}).get("datatype"):
            return fqn
        for value in type_ref.values():
            found = _struct_in(value, types)
            if found:
                return found
    elif isinstance(type_ref, list):
        for value in type_ref:
            found = _struct_in(value, types)
            if found:
                return found
    return None


def is_deprecation_notice(text: str) -> bool:
    return bool(_DEPRECATED.search(text))


class ProviderSchema:
    """The resources, data sources and provider configuration of one hashicorp/google release."""

    def __init__(self, types: Mapping[str, Any]):
        self._types = types
        self.resources: dict[str, str] = {}  # google_x -> its config struct
        self.data_sources: dict[str, str] = {}
        self.provider_config: str | None = None
        versions = set()
        for fqn, t in types.items():
            found = t.get("kind") == "class" and _REGISTRY.search(t.get("docs", {}).get("summary", ""))
            if not found or "initializer" not in t:
                continue
            config = next((p["type"]["fqn"] for p in t["initializer"].get("parameters", ())
                           if p["name"] == "config" and "fqn" in p["type"]), None)
            if config is None:
                continue
            versions.add(found["version"])
            kind, name = found["kind"], found["name"]
            if kind == "resources":
                self.resources[name] = config
            elif kind == "data-sources":
                self.data_sources[f"google_{name.removeprefix('google_')}"] = config
            elif name == "google":
                self.provider_config = config
        assert len(versions) == 1, f"the assembly links several provider versions: {sorted(versions)}"
        self.provider_version = versions.pop()
        self._blocks: dict[str, Block] = {}

    @classmethod
    def installed(cls) -> "ProviderSchema":
        return cls(_read_assembly(assembly_path())["types"])

    def block(self, fqn: str) -> Block:
        """The arguments of a config struct or block struct (inherited properties included)."""
        if fqn not in self._blocks:
            arguments = {}
            for prop in self._properties(fqn):
                if prop.get("static"):
                    continue
                anchor = _ANCHOR.search(_docs_text(prop.get("docs", {})))
                name = anchor.group(1) if anchor else _snake(prop["name"])
                arguments[name] = Argument(name, not prop.get("optional", False),
                                           is_deprecation_notice(_docs_text(prop.get("docs", {}))),
                                           _struct_in(prop["type"], self._types))
            self._blocks[fqn] = Block(fqn, arguments)
        return self._blocks[fqn]

    def _properties(self, fqn: str) -> Iterator[dict[str, Any]]:
        t = self._types[fqn]
        yield from t.get("properties", ())
        for parent in t.get("interfaces", ()):
            if parent in self._types:  # cdktf.TerraformMetaArguments is not in this assembly: meta-arguments
                yield from self._properties(parent)

    @cached_property
    def deprecated_arguments(self) -> list[tuple[str, str]]:
        """Every (struct, argument) whose description says it is deprecated (for the detector's own test)."""
        return [(fqn, a.name) for fqn, t in self._types.items() if t.get("datatype")
                for a in self.block(fqn).arguments.values() if a.deprecated]
