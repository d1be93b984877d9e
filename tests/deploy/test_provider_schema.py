"""The Terraform configuration, proven against the Google provider's schema (``terraform validate`` offline).

``terraform init`` cannot download providers here, so this test reads the provider's schema from the CDK for
Terraform bindings generated from it (tests/deploy/provider_schema.py; pinned in pyproject.toml's ``schema``
extra, 16.12.1 = hashicorp/google 6.50.0, docs/deploy.md): every resource and data source that any ``.tf``
file under terraform/ declares exists in that release, every argument and block set exists there (in
``dynamic`` blocks too), every required argument is set, and no deprecated argument is used. The release must
satisfy the constraint of versions.tf, which starts at that release: nothing older is ever used.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Iterator, Mapping

import pytest

from tests.deploy import provider_schema as ps
from tests.deploy import tf

# Arguments Terraform itself gives every resource, data source or provider (not the provider's schema).
META_ARGUMENTS = {"count", "for_each", "depends_on", "lifecycle", "provider", "provisioner", "connection"}
PROVIDER_META = {"alias"}
# Resources of other providers, pinned in versions.tf beside google (not in this schema package).
OTHER_PROVIDERS = {"random": "hashicorp/random"}
PYPROJECT = tf.REPO_ROOT / "pyproject.toml"


@pytest.fixture(scope="module")
def schema() -> ps.ProviderSchema:
    try:
        return ps.ProviderSchema.installed()
    except ps.SchemaPackageMissing as exc:
        pytest.fail(str(exc))


def tf_files() -> list[Path]:
    return sorted(tf.TF_DIR.rglob("*.tf"))


def _blocks(doc: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    value = doc.get(key, [])
    return value if isinstance(value, list) else [value]


def declarations(path: Path) -> Iterator[tuple[str, str, str, dict[str, Any]]]:
    """(kind, type, name, body) of every resource, data source and provider block of one file."""
    doc = tf.parse(path)
    for kind in ("resource", "data"):
        for block in _blocks(doc, kind):
            for rtype, named in block.items():
                for name, body in named.items():
                    yield kind, rtype, name, body
    for block in _blocks(doc, "provider"):
        for name, body in block.items():
            yield "provider", name, name, body


def problems(schema: ps.ProviderSchema, block: ps.Block, body: Mapping[str, Any], where: str,
             meta: set[str]) -> list[str]:
    """What the provider would refuse in one body: unknown, deprecated or missing arguments, at any depth."""
    found, given = [], set()
    for dyn in body.get("dynamic", []):
        for name, spec in dyn.items():
            given.add(name)
            found += _nested(schema, block, name, spec.get("content", []), f"{where}.dynamic.{name}")
    for name, value in body.items():
        if name in meta or name == "dynamic":
            continue
        given.add(name)
        found += _nested(schema, block, name, value, f"{where}.{name}")
    found += [f"{where}: required argument {name!r} is not set" for name in sorted(block.required() - given)]
    return found


def _nested(schema: ps.ProviderSchema, block: ps.Block, name: str, value: Any, where: str) -> list[str]:
    arg = block.arguments.get(name)
    if arg is None:
        return [f"{where}: no such argument or block in hashicorp/google {schema.provider_version}"]
    found = [f"{where}: deprecated"] if arg.deprecated else []
    if arg.block and isinstance(value, list) and all(isinstance(v, dict) for v in value):
        for i, item in enumerate(value):
            found += problems(schema, schema.block(arg.block), item, f"{where}[{i}]", set())
    return found


def check_file(schema: ps.ProviderSchema, path: Path) -> list[str]:
    found = []
    for kind, rtype, name, body in declarations(path):
        where = f"{path.relative_to(tf.REPO_ROOT)}: {'' if kind == 'resource' else kind + ' '}{rtype}.{name}"
        if kind == "provider":
            if rtype in OTHER_PROVIDERS:
                continue
            assert rtype == "google", f"{where}: a provider this test does not know"
            found += problems(schema, schema.block(schema.provider_config), body, where, PROVIDER_META)
            continue
        if rtype.split("_", 1)[0] in OTHER_PROVIDERS:
            continue
        table = schema.resources if kind == "resource" else schema.data_sources
        if rtype not in table:
            found.append(f"{where}: hashicorp/google {schema.provider_version} has no {kind} {rtype}")
            continue
        found += problems(schema, schema.block(table[rtype]), body, where, META_ARGUMENTS)
    return found


# ---- the configuration -------------------------------------------------------------------------------


@pytest.mark.parametrize("path", tf_files(), ids=lambda p: str(p.relative_to(tf.TF_DIR)))
def test_every_tf_file_is_accepted_by_the_provider_schema(schema, path):
    found = check_file(schema, path)
    assert not found, "\n".join(found)


def test_every_resource_type_declared_is_checked(schema):
    """No resource escapes the check but those of the other providers versions.tf pins."""
    kinds = {rtype for path in tf_files() for kind, rtype, _, _ in declarations(path) if kind != "provider"}
    others = {k for k in kinds if not k.startswith("google_")}
    assert {k.split("_", 1)[0] for k in others} <= set(OTHER_PROVIDERS), others
    versions = tf.parse(tf.TF_DIR / "versions.tf")["terraform"][0]["required_providers"][0]
    assert {versions[p]["source"] for p in {k.split("_", 1)[0] for k in others}} <= set(OTHER_PROVIDERS.values())
    assert {"google_monitoring_alert_policy", "google_logging_metric", "google_monitoring_dashboard",
            "google_firestore_backup_schedule", "google_bigquery_table", "google_pubsub_subscription"} <= kinds


# ---- the schema package: the version versions.tf allows, the one pinned, read right ------------------


def _satisfies(version: str, constraint: str) -> bool:
    """Terraform's version constraint syntax (=, !=, >, >=, <, <=, ~>), comma-separated, all must hold."""
    v = tuple(int(x) for x in version.split("."))
    for part in constraint.split(","):
        op, want = re.fullmatch(r"\s*(~>|>=|<=|!=|=|>|<)?\s*([0-9.]+)\s*", part).groups()
        w = tuple(int(x) for x in want.split("."))
        padded = w + (0,) * (3 - len(w))
        ok = {"=": v == padded, None: v == padded, "!=": v != padded, ">": v > padded, ">=": v >= padded,
              "<": v < padded, "<=": v <= padded,
              "~>": v >= padded and v[:len(w) - 1] == w[:len(w) - 1]}[op]
        if not ok:
            return False
    return True


@pytest.mark.parametrize("version, constraint, ok", [
    ("6.50.0", "~> 6.50", True), ("6.51.2", "~> 6.50", True), ("7.0.0", "~> 6.50", False),
    ("6.49.0", "~> 6.50", False), ("6.50.3", "~> 6.50.0", True), ("6.51.0", "~> 6.50.0", False),
    ("6.50.0", ">= 6.0, < 7.0", True), ("7.1.0", ">= 6.0, < 7.0", False)])
def test_version_constraints_are_read_as_terraform_does(version, constraint, ok):
    assert _satisfies(version, constraint) is ok


def test_schema_release_is_the_oldest_versions_tf_allows(schema):
    """The schema proven is the floor of every configuration's google constraint: nothing older is used, and
    newer 6.x releases only add (a provider removes arguments in a major release)."""
    pinned = re.search(r'"cdktf-cdktf-provider-google==([0-9.]+)"', PYPROJECT.read_text()).group(1)
    assert ps.package_version() == pinned, f"installed {ps.package_version()}, pyproject pins {pinned}: make install"
    for path in tf_files():
        for block in _blocks(tf.parse(path), "terraform"):
            for providers in _blocks(block, "required_providers"):
                if "google" in providers:
                    constraint = providers["google"]["version"]
                    assert _satisfies(schema.provider_version, constraint), f"{path}: {constraint}"
                    floor = re.fullmatch(r"~> ([0-9]+\.[0-9]+)", constraint)
                    assert floor and floor.group(1) == schema.provider_version.rsplit(".", 1)[0], \
                        f"{path}: google {constraint}: its floor must be the release proven, {schema.provider_version}"
    deploy = (tf.REPO_ROOT / "docs" / "deploy.md").read_text()
    assert f"cdktf-cdktf-provider-google {pinned}" in deploy and f"hashicorp/google {schema.provider_version}" in deploy


def test_the_check_refuses_what_terraform_would(schema):
    """The check itself: an unknown resource, argument or nested block, a missing required argument, a
    deprecated argument, each through a static and a dynamic block."""
    sub = schema.block(schema.resources["google_pubsub_subscription"])
    ok = {"name": "s", "topic": "t", "push_config": [{"push_endpoint": "https://x", "oidc_token": [
        {"service_account_email": "a@b"}]}], "for_each": "${local.x}", "lifecycle": [{}]}
    assert problems(schema, sub, ok, "s", META_ARGUMENTS) == []
    assert problems(schema, sub, {**ok, "ack_deadline": 10}, "s", META_ARGUMENTS) == [
        "s.ack_deadline: no such argument or block in hashicorp/google 6.50.0"]
    assert problems(schema, sub, {"name": "s"}, "s", META_ARGUMENTS) == ["s: required argument 'topic' is not set"]
    nested = {**ok, "dynamic": [{"push_config": {"for_each": "${[1]}", "content": [{"oidc_token": [{}]}]}}]}
    assert sorted(problems(schema, sub, {k: v for k, v in nested.items() if k != "push_config"}, "s",
                           META_ARGUMENTS)) == sorted([
        "s.dynamic.push_config[0]: required argument 'push_endpoint' is not set",
        "s.dynamic.push_config[0].oidc_token[0]: required argument 'service_account_email' is not set"])
    webhook = schema.block(schema.resources["google_dialogflow_cx_webhook"])
    assert "enable_spell_correction" in {a.name for a in webhook.arguments.values() if a.deprecated}
    assert "google_project" in schema.data_sources and "google_nothing" not in schema.resources


@pytest.mark.parametrize("text, deprecated", [
    ("Deprecated. Indicates if automatic spell correction is enabled.", True),
    ("**DEPRECATED** Whether to automatically manage Service Mesh control planes.", True),
    ("Field will be deprecated in a future release.", True),
    ("This field is deprecated; use gc_rules.", True),
    ("Possible values: [\"DEPRECATED\", \"DRAFT\", \"ACTIVE\"]", False),
    ("Read https://cloud.google.com/compute/docs/images/create-delete-deprecate-private-images", False),
    ("The name of the subscription.", False)])
def test_deprecation_notices_are_recognised(text, deprecated):
    assert ps.is_deprecation_notice(text) is deprecated
