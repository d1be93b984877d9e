"""Terraform's side of issue 37's configuration items (docs/security.md items 18, 21 and 23): no provider may
take a name of the platform's NATS users, the build identity reads the sources bucket and no other, a cluster's
``nats_url`` reaches the ingress as a list of servers."""

from __future__ import annotations

import pytest
import yaml
from dcm_status_contracts.identity import RESERVED_PROVIDER_NAMES

from infra import topology as topo
from tests.deploy import tf
from tests.deploy.tf import block

BUILD_SA = "${google_service_account.build[0].member}"


# ---- item 18: reserved provider names -----------------------------------------------------------------------
@pytest.mark.parametrize("name", RESERVED_PROVIDER_NAMES)
def test_cloud_providers_refuses_a_name_of_the_platforms_nats_users(terraform, name):
    with pytest.raises(AssertionError, match=r"cloud_providers: \\?\"platform\\?\" and \\?\"control-plane\\?\" are reserved"):
        tf.evaluate({"p": "var.cloud_providers"}, {"cloud_providers": ["aws", name]}, terraform)
    assert tf.evaluate({"p": "var.cloud_providers"}, {"cloud_providers": ["aws", "platform-x"]}, terraform)["p"] == [
        "aws", "platform-x"]


def test_a_topology_provider_with_a_reserved_name_stops_the_plan(config: tf.Config, terraform, tmp_path):
    doc = topo.read()
    doc["providers"] = [*doc["providers"], "platform"]
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    got = tf.evaluate({"named": "local.providers_with_reserved_names", "reserved": "local.reserved_provider_names"},
                      {"topology_file": str(path)}, terraform)
    assert got == {"named": ["platform"], "reserved": list(RESERVED_PROVIDER_NAMES)}
    assert tf.evaluate({"named": "local.providers_with_reserved_names"}, terraform=terraform)["named"] == []
    preconditions = block(config.resource("google_pubsub_topic", "topic"), "lifecycle")["precondition"]
    preconditions = preconditions if isinstance(preconditions, list) else [preconditions]
    assert "${length(local.providers_with_reserved_names) == 0}" in [p["condition"] for p in preconditions]


def test_terraform_reserves_the_names_the_contracts_reserve():
    variables = (tf.TF_DIR / "variables.tf").read_text()
    listed = "[" + ", ".join(f'"{n}"' for n in RESERVED_PROVIDER_NAMES) + "]"
    assert f"setintersection(var.cloud_providers, {listed})" in variables


# ---- item 21: the build identity and the state bucket ---------------------------------------------------------
def test_the_build_identity_holds_no_project_wide_storage_role(config: tf.Config):
    for (rtype, name), body in config.resources.items():
        if rtype == "google_project_iam_member":
            roles = str(body.get("for_each", "")) + str(body.get("role", ""))
            assert "roles/storage." not in roles, f"{rtype}.{name} grants a storage role on the whole project " \
                                                  "(it reaches the Terraform state bucket)"


def test_the_build_identity_reads_the_sources_bucket_only(config: tf.Config):
    grants = {key: body for key, body in config.resources.items()
              if key[0].endswith("_iam_member") and body.get("member") == BUILD_SA}
    storage = {key: body for key, body in grants.items() if "storage" in key[0] or "storage" in str(body)}
    assert list(storage) == [("google_storage_bucket_iam_member", "build_sources")]
    grant = storage[("google_storage_bucket_iam_member", "build_sources")]
    assert (grant["bucket"], grant["role"]) == ("${google_storage_bucket.sources.name}", "roles/storage.objectViewer")
    assert "condition" not in grant
    project = config.resource("google_project_iam_member", "build")
    assert sorted(yaml.safe_load(project["for_each"].split("toset(")[1].split(")")[0])) == [
        "roles/artifactregistry.writer", "roles/logging.logWriter"]


# ---- item 23: nats_url, a cluster ------------------------------------------------------------------------------
def test_a_clusters_nats_url_reaches_the_ingress_as_a_list_of_servers(terraform):
    from shared.runtime.nats_settings import nats_from_env

    urls = "tls://nats-1.example.com:4222, tls://nats-2.example.com:4222"  # the validation trims each
    env = tf.evaluate({"value": "local.nats_ingress_env"}, {"nats_url": urls, "nats_user": "platform"},
                      terraform)["value"]
    assert nats_from_env(env).servers == ("tls://nats-1.example.com:4222", "tls://nats-2.example.com:4222")
