"""Terraform guards that already hold (issue 25, "Already holding"): nothing is granted to a public
principal, whichever variable a deployer fills in. The threat model: docs/security.md.

tests/deploy/test_terraform.py::test_nothing_is_public checks the files hold no public member and
::test_api_invokers_refuse_public_and_malformed_members the api's invokers; here, every other way a
member reaches an IAM grant.
"""

from __future__ import annotations

import re

import pytest

from tests.deploy import tf

# Where the member of an IAM grant may come from: an identity this stack creates, a Google service
# agent of the project (a fixed name), or a variable whose validation refuses public principals.
ALLOWED_MEMBERS = (
    re.compile(r"^\$\{google_service_account\.[a-z_]+(\[[^\]]+\])?\.member\}$"),
    re.compile(r"^\$\{local\.(pubsub_service_agent|scheduler_service_agent)\}$"),
    # the Pub/Sub agent of this project or of the lanes project (var.lanes_project), by project id
    re.compile(r"^\$\{local\.pubsub_service_agents\[each\.(key|value\.project)\]\}$"),
    re.compile(r"^\$\{local\.provider_publisher_members\[each\.value\.provider\]\}$"),  # var.provider_publishers
    re.compile(r"^\$\{each\.value\.member\}$"),  # api_invoker: var.api_invokers
)
PUBLIC = ["allUsers", "allAuthenticatedUsers", " allUsers", "ALLUSERS"]


def test_every_iam_grant_goes_to_a_created_identity_a_service_agent_or_a_validated_variable(config: tf.Config):
    grants = {key: body for key, body in config.resources.items() if key[0].endswith("_iam_member")}
    assert len(grants) >= 8
    for (rtype, name), body in grants.items():
        assert any(p.match(body["member"]) for p in ALLOWED_MEMBERS), f"{rtype}.{name}: member {body['member']}"
    assert not [k for k in config.resources if k[0].endswith(("_iam_binding", "_iam_policy"))], "additive only"
    agents = {name: config.locals[name] for name in ("pubsub_service_agent", "scheduler_service_agent")}
    for name, value in agents.items():
        assert re.fullmatch(r"serviceAccount:service-\$\{data\.google_project\.this\.number\}@gcp-sa-[a-z]+\."
                            r"iam\.gserviceaccount\.com", value), (name, value)
    lanes_agent = "serviceAccount:service-${data.google_project.lanes.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    assert config.locals["pubsub_service_agents"] == (
        "${merge({(var.project_id) = local.pubsub_service_agent}, {(local.lanes_project) = \"" + lanes_agent + "\"})}")
    api = config.resource("google_cloud_run_v2_service_iam_member", "api_invoker")
    assert "var.api_invokers" in api["for_each"]
    members = config.locals["provider_publisher_members"]
    assert "google_service_account.provider" in members and "var.provider_publishers" in members


@pytest.mark.parametrize("member", PUBLIC)
def test_provider_publishers_refuse_public_principals(terraform, member):
    with pytest.raises(AssertionError, match="provider_publishers values must"):
        tf.evaluate({"members": "var.provider_publishers"}, {"provider_publishers": {"aws": member}}, terraform)


def test_provider_publishers_accept_an_iam_member(terraform):
    member = "serviceAccount:aws-bridge@other-project.iam.gserviceaccount.com"
    got = tf.evaluate({"members": "var.provider_publishers"}, {"provider_publishers": {"aws": member}}, terraform)
    assert got["members"] == {"aws": member}


@pytest.mark.parametrize("member", PUBLIC)
def test_api_invokers_refuse_public_principals_in_any_spelling(terraform, member):
    with pytest.raises(AssertionError, match="api_invokers must"):
        tf.evaluate({"members": "var.api_invokers"}, {"api_invokers": [member]}, terraform)
