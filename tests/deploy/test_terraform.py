"""Terraform deploys exactly what the local stack runs.

The topology is expanded by Terraform from infra/topology.yaml (terraform/
topology.tf). These tests evaluate that expansion with the real ``terraform
console`` and compare it, subscription by subscription, with what
infra/topology.py gives the local stack; then they check, in the parsed HCL,
that the resources are driven by that expansion (for_each, dynamic blocks) and
carry the security properties the design needs.
"""

from __future__ import annotations

import base64
import json
import re
from pathlib import Path

import pytest
import yaml

from infra import topology as topo
from tests.deploy import tf
from tests.deploy.tf import block, dynamic

REPO_ROOT = tf.REPO_ROOT
SUB_KEYS = ("name", "topic_name", "push", "enable_message_ordering", "dead_letter", "ack_deadline_seconds",
            "max_delivery_attempts", "minimum_backoff", "maximum_backoff", "retention", "filter",
            "oldest_unacked_alert")


def expected_subscription(s: topo.SubscriptionSpec) -> dict:
    """A subscription of the local stack, in the shape of local.subscriptions."""
    return {"name": s.name, "topic_name": s.topic, "push": s.push,
            "enable_message_ordering": s.enable_message_ordering, "dead_letter": s.dead_letter,
            "ack_deadline_seconds": s.ack_deadline_seconds, "max_delivery_attempts": s.max_delivery_attempts,
            "minimum_backoff": f"{s.minimum_backoff}s", "maximum_backoff": f"{s.maximum_backoff}s",
            "retention": f"{s.message_retention}s", "filter": s.filter,
            "oldest_unacked_alert": s.oldest_unacked_alert}


def expansion(terraform: str, **variables) -> dict:
    return tf.evaluate({"topics": "local.topics", "subscriptions": "local.subscriptions",
                        "functions": "local.functions", "providers": "local.cloud_providers",
                        "topic_retention": "local.topic_retention", "exports": "local.exports"},
                       variables, terraform)


def assert_same_topology(got: dict, want: topo.Topology) -> None:
    assert sorted(t["name"] for t in got["topics"].values()) == sorted(t.name for t in want.topics)
    topic_names = {t["key"]: t["name"] for t in got["topics"].values() if t["provider"] is None}
    subs = {name: {**{k: s[k] for k in SUB_KEYS},
                   "dead_letter_topic": topic_names[s["dead_letter_topic"]] if s["dead_letter"] else None}
            for name, s in got["subscriptions"].items()}
    wanted = {s.name: {**expected_subscription(s), "dead_letter_topic": s.dead_letter_topic}
              for s in want.subscriptions}
    missing, extra = sorted(set(wanted) - set(subs)), sorted(set(subs) - set(wanted))
    assert not missing and not extra, f"missing in Terraform: {missing}; not in the declaration: {extra}"
    for name in wanted:
        assert subs[name] == wanted[name], f"subscription {name} differs from the local stack's"
    assert sorted(got["functions"]) == sorted(want.functions)
    assert got["exports"] == {e.name: {"name": e.name, "topic": e.topic_key, "topic_name": e.topic,
                                       "dataset": e.dataset, "table": e.table, "event_schema": e.event_schema,
                                       "oldest_unacked_alert": e.oldest_unacked_alert} for e in want.exports}


# ---- the expansion of infra/topology.yaml --------------------------------------


def test_topology_comes_from_the_shared_declaration(config: tf.Config):
    assert config.locals["topology"] == "${yamldecode(file(local.topology_file))}"
    default = re.fullmatch(r'\$\{coalesce\(var\.topology_file, "\$\{path\.module\}/(.+)"\)\}',
                           config.locals["topology_file"])
    assert default, config.locals["topology_file"]
    assert (tf.TF_DIR / default.group(1)).resolve() == topo.TOPOLOGY_FILE.resolve()


@pytest.mark.parametrize("providers", [None, ["aws"], ["aws", "gcp", "openstack"]],
                         ids=["declared-providers", "one-provider", "added-providers"])
def test_expansion_equals_the_local_stack(terraform, providers):
    got = expansion(terraform, **({"cloud_providers": providers} if providers else {}))
    want = topo.load(providers)
    assert got["providers"] == list(want.providers)
    assert_same_topology(got, want)
    ingress = {t["provider"]: t["name"] for t in got["topics"].values() if t["key"] == "ingress"}
    assert ingress == {p: want.topic("ingress", p) for p in want.providers}


def test_expansion_follows_the_declaration_not_a_copy(terraform, tmp_path):
    """Edit the YAML (drop, add, change subscriptions and defaults): Terraform follows."""
    doc = topo.read()
    doc["defaults"]["max_delivery_attempts"] = 9
    doc["defaults"]["oldest_unacked_alert"] = "120s"
    doc["exports"].append({"name": "dcm-deadletters-bigquery", "topic": "deadletter", "dataset": "d", "table": "t",
                           "event_schema": "schemas/events/status-changed-v1.json", "oldest_unacked_alert": False})
    doc["defaults"]["retry_policy"]["maximum_backoff"] = "45s"
    doc["subscriptions"] = [s for s in doc["subscriptions"] if s["name"] != "dcm-billing"]
    doc["subscriptions"].append({"name": "dcm-audit-{provider}", "topic": "ingress", "pull": True,
                                 "dead_letter": False, "ack_deadline_seconds": 20,
                                 "retry_policy": {"minimum_backoff": "5s"}})
    doc["subscriptions"].append({"name": "dcm-upsert-replica-{provider}", "topic": "normalized", "push": "upsert",
                                 "enable_message_ordering": True, "max_delivery_attempts": 12,
                                 "message_retention_duration": "3600s", "filter": 'attributes.provider = "aws"'})
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    got = expansion(terraform, topology_file=str(path), cloud_providers=["aws", "azure"])
    want = topo.load(["aws", "azure"], path=path)
    assert "dcm-billing" not in got["subscriptions"]
    assert {"dcm-audit-aws", "dcm-audit-azure", "dcm-upsert-replica-aws"} <= set(got["subscriptions"])
    assert_same_topology(got, want)


def test_variables_override_the_declared_defaults_like_editing_them(terraform, tmp_path):
    """A variable override equals the same edit of `defaults:`; a subscription's own policy still wins."""
    doc = topo.read()
    doc["subscriptions"].append({"name": "dcm-own-policy", "topic": "changed", "pull": True,
                                 "max_delivery_attempts": 20, "retry_policy": {"maximum_backoff": "90s"}})
    declared = tmp_path / "declared.yaml"
    declared.write_text(yaml.safe_dump(doc))
    got = expansion(terraform, topology_file=str(declared), max_delivery_attempts=7, retry_maximum_backoff="40s",
                    ack_deadline_seconds=30, message_retention_duration="86400s")

    doc["defaults"].update(max_delivery_attempts=7, ack_deadline_seconds=30, message_retention_duration="86400s")
    doc["defaults"]["retry_policy"]["maximum_backoff"] = "40s"
    edited = tmp_path / "edited.yaml"
    edited.write_text(yaml.safe_dump(doc))
    assert_same_topology(got, topo.load(path=edited))
    own = got["subscriptions"]["dcm-own-policy"]
    assert (own["maximum_backoff"], own["max_delivery_attempts"]) == ("90s", 20)
    assert got["subscriptions"]["dcm-upsert-aws"]["maximum_backoff"] == "40s"
    assert got["topic_retention"] == "86400s"


def test_every_function_has_a_push_subscription_and_the_deadletter_topic_is_read(terraform):
    got = expansion(terraform)
    http = {name for name, f in got["functions"].items() if f["http"]}
    assert http == set(topo.load().http_functions) == {"api"}, "http: true of infra/topology.yaml"
    pushed = {s["push"] for s in got["subscriptions"].values() if s["push"]}
    assert pushed == set(got["functions"]) - http, "every declared function but the http ones is a push target"
    assert not pushed & http, "no subscription pushes to a function called over HTTP"
    on_dlq = [s for s in got["subscriptions"].values() if s["topic_key"] == "deadletter"]
    assert any(s["push"] == "deadletter" for s in on_dlq), "the deadletter function reads the dead-letter topic"
    assert any(s["pull"] for s in on_dlq), "an archive subscription keeps every dead letter"
    assert not any(s["dead_letter"] for s in on_dlq), "a dead-letter subscription must not dead-letter into itself"
    for s in got["subscriptions"].values():
        assert bool(s["push"]) != bool(s["pull"]), f"{s['name']}: exactly one of push / pull"
    assert got["subscriptions"]["dcm-upsert-aws"]["enable_message_ordering"] is True
    # one lane to upsert per provider: a flooding provider does not hold another's up (docs/lifecycle.md)
    lanes = {s["name"]: s["topic_name"] for s in got["subscriptions"].values() if s["push"] == "upsert"}
    assert lanes == {f"dcm-upsert-{p}": f"dcm-status-normalized-{p}" for p in topo.load().providers}
    # webhook deliveries: the retry lane dead-letters into the first lane (docs/callbacks.md), never into itself
    retry = got["subscriptions"]["dcm-callbacks-retry"]
    assert (retry["topic_key"], retry["dead_letter_topic"], retry["max_delivery_attempts"]) == (
        "callbacks_retry", "callbacks", 100)
    assert (retry["minimum_backoff"], retry["maximum_backoff"]) == ("60s", "600s")
    assert all(s["dead_letter_topic"] != s["topic_key"] for s in got["subscriptions"].values() if s["dead_letter"])


def test_function_entry_points_and_env_match_the_local_stack(terraform):
    got = tf.evaluate({"functions": "local.functions", "env": "local.topology_env",
                       "access": "local.function_access", "push": "local.push_functions",
                       "http": "local.http_functions"}, terraform=terraform)
    assert sorted(got["http"]) == sorted(topo.load().http_functions)
    assert sorted(got["push"]) == sorted(set(got["functions"]) - set(got["http"]))
    for name, f in got["functions"].items():
        assert f["entry_point"] == name
        main = (REPO_ROOT / "functions" / name / "main.py").read_text()
        assert re.search(rf"^(def {name}\(|{name} = )", main, re.M), f"functions/{name}/main.py defines no {name}"
        s = f["settings"]
        assert s["max_instance_count"] >= 1 and s["max_instance_request_concurrency"] >= 1
    assert got["env"] == topo.load().env()
    assert set(got["access"]) == set(got["functions"]), "declare the grants of every function (topology.tf)"


# ---- resources driven by the expansion ----------------------------------------


def test_topics_and_subscriptions_are_created_from_the_expansion(config: tf.Config):
    topic = config.resource("google_pubsub_topic", "topic")
    assert topic["for_each"] == "${local.topics}"
    assert topic["name"] == "${each.value.name}"
    assert topic["message_retention_duration"] == "${local.topic_retention}", "topics retain messages for replay"

    sub = config.resource("google_pubsub_subscription", "subscription")
    assert sub["for_each"] == "${local.subscriptions}"
    assert sub["name"] == "${each.value.name}"
    assert sub["topic"] == "${google_pubsub_topic.topic[each.value.topic].id}"
    for attr, key in (("ack_deadline_seconds", "ack_deadline_seconds"), ("message_retention_duration", "retention"),
                      ("enable_message_ordering", "enable_message_ordering"), ("filter", "filter")):
        assert sub[attr] == f"${{each.value.{key}}}", attr
    assert block(sub, "expiration_policy") == {"ttl": ""}, "subscriptions never expire"
    assert block(sub, "retry_policy") == {"minimum_backoff": "${each.value.minimum_backoff}",
                                          "maximum_backoff": "${each.value.maximum_backoff}"}

    dlp = dynamic(sub, "dead_letter_policy")
    assert dlp["for_each"] == ("${each.value.dead_letter ? [google_pubsub_topic.topic[each.value.dead_letter_topic].id]"
                               " : []}")
    assert config.locals["deadletter_topic"] == '${google_pubsub_topic.topic["deadletter"]}'
    assert block(dlp, "content") == {"dead_letter_topic": "${dead_letter_policy.value}",
                                     "max_delivery_attempts": "${each.value.max_delivery_attempts}"}

    push = dynamic(sub, "push_config")
    assert push["for_each"] == "${each.value.push != null ? [each.value.push] : []}"
    content = block(push, "content")
    url = "${local.function_urls[push_config.value]}"
    assert content["push_endpoint"] == url + "/projects/${each.value.project}/topics/${each.value.topic_name}"
    assert "no_wrapper" not in content, "functions-framework needs the Pub/Sub envelope"
    assert block(content, "oidc_token") == {"service_account_email": "${google_service_account.push_invoker.email}",
                                            "audience": url}


def test_functions_are_deployed_from_hash_named_zips_with_their_own_identity(config: tf.Config):
    fn = config.resource("google_cloudfunctions2_function", "function")
    assert fn["for_each"] == "${local.functions}"
    assert "event_trigger" not in fn, "reached only through our push subscriptions (dead-letter policy)"
    build = block(fn, "build_config")
    assert build["entry_point"] == "${each.value.entry_point}"
    assert block(block(build, "source"), "storage_source")["object"] == \
        "${google_storage_bucket_object.source[each.key].name}"
    obj = config.resource("google_storage_bucket_object", "source")
    assert obj["for_each"] == "${local.function_zips}"
    assert obj["name"] == "${each.key}-${filesha256(each.value)}.zip", "a code change must redeploy"
    assert config.locals["function_zips"] == \
        '${{for name in keys(local.functions) : name => "${local.function_source_dir}/${name}.zip"}}'

    service = block(fn, "service_config")
    assert service["service_account_email"] == "${google_service_account.function[each.key].email}"
    for attr in ("max_instance_count", "min_instance_count", "max_instance_request_concurrency",
                 "available_memory", "available_cpu", "timeout_seconds"):
        assert service[attr] == f"${{each.value.settings.{attr}}}", attr
    # private at the network level; the status API alone may be opened wider, by choice (IAM still applies)
    assert service["ingress_settings"] == \
        "${each.value.http ? coalesce(var.api_ingress_settings, var.ingress_settings) : var.ingress_settings}"
    assert config.variables["ingress_settings"]["default"] == "ALLOW_INTERNAL_ONLY"
    assert config.variables["api_ingress_settings"]["default"] is None, "the api as private as the others"
    assert config.resource("google_service_account", "function")["for_each"] == "${local.functions}"


def evaluate_with(expression: str, stand_ins: dict[str, str], terraform: str, **variables):
    """An expression of a file that uses resources, evaluated by ``terraform console`` (tf.evaluate) with each
    reference to a resource replaced by a stand-in value."""
    assert expression.startswith("${") and expression.endswith("}"), expression
    body = expression[2:-1]
    for reference, value in stand_ins.items():
        assert reference in body, f"{reference} not in {body}"
        body = body.replace(reference, value)
    return tf.evaluate({"value": body}, variables, terraform)["value"]


PUSH_INVOKER = "push-invoker@dcm-test-project.iam.gserviceaccount.com"
KEYS_SECRET = "projects/dcm-test-project/secrets/dcm-callback-keys/versions/latest"


def function_env(config: tf.Config, terraform: str) -> dict[str, dict[str, str]]:
    """local.function_env as Terraform computes it: function => the settings only it gets."""
    return evaluate_with(config.locals["function_env"], {
        "local.function_urls[name]": '"https://${name}.example"',
        "google_service_account.push_invoker.email": f'"{PUSH_INVOKER}"',
        "local.callback_keys_secret_version": f'"{KEYS_SECRET}"'}, terraform)


def test_functions_verify_the_push_token_in_production(config: tf.Config):
    env = block(config.resource("google_cloudfunctions2_function", "function"), "service_config")[
        "environment_variables"]
    assert env.startswith("${merge(local.topology_env, {") and \
        env.endswith("}, local.trace_env, local.function_env[each.key])}")
    assigned = dict(re.findall(r"(\w+) = ([^,}]+)", env + config.locals["function_env"]))
    assigned |= config.locals["trace_env"]  # tracing.tf: spans to Cloud Trace
    assert assigned["DCM_PROJECT"] == "var.project_id"
    assert assigned["DCM_PUSH_AUDIENCE"] == "local.function_urls[name]", "audience = the push token's audience"
    assert assigned["DCM_PUSH_SERVICE_ACCOUNT"] == "google_service_account.push_invoker.email"
    assert assigned["DCM_LEDGER_TTL_DAYS"] == "tostring(var.ledger_ttl_days)", "the api's change feed retention"
    # a live stream of the api ends before the request timeout (shared/api/feed.py waits 15 s at most)
    assert re.search(r"DCM_STREAM_SECONDS = tostring\(max\(each\.value\.settings\.timeout_seconds - (\d+), ", env)
    assert int(re.search(r"timeout_seconds - (\d+),", env).group(1)) > 15
    # every setting the code reads is set, except the local-mode switch and test overrides (the
    # feed's settle time: its default is the contract's, shared/contracts/change_feed.py)
    read_by_code = set()
    for path in (REPO_ROOT / "shared").rglob("*.py"):
        read_by_code |= set(re.findall(r'(?:environ\.get|env\.get|_flag)\(\s*(?:env,\s*)?"(DCM_[A-Z0-9_]+)"',
                                       path.read_text()))
    # the local stack's keyring file (production: DCM_CALLBACK_KEYS_SECRET, secrets.tf)
    # and the local span files' directory (DCM_TRACE_DIR; production exports to Cloud Trace)
    not_in_production = {"DCM_LOCAL_MODE", "DCM_SCHEMAS_DIR", "DCM_FEED_SETTLE_SECONDS", "DCM_CALLBACK_KEYS_FILE",
                         "DCM_TRACE_DIR"}
    set_here = set(assigned) | set(topo.load().env())
    assert read_by_code - not_in_production <= set_here, sorted(read_by_code - not_in_production - set_here)
    assert "DCM_LOCAL_MODE" in read_by_code


def test_every_pushed_function_gets_its_push_settings_and_only_notify_and_the_api_the_keys(config, terraform):
    """A pushed function refuses to start without its push settings (shared/runtime/auth.py); the api takes no
    push and gets none; the keyring's name goes where the key may be read (secrets.tf)."""
    got = function_env(config, terraform)
    pushed, http = set(topo.load().functions) - set(topo.load().http_functions), set(topo.load().http_functions)
    assert set(got) == pushed | http
    for name in pushed:
        assert got[name]["DCM_PUSH_AUDIENCE"] == f"https://{name}.example", name  # its own URL: the OIDC audience
        assert got[name]["DCM_PUSH_SERVICE_ACCOUNT"] == PUSH_INVOKER, name
    for name in http:
        assert "DCM_PUSH_AUDIENCE" not in got[name] and "DCM_PUSH_SERVICE_ACCOUNT" not in got[name], name
        # it verifies its callers' ID tokens (shared/api/callers.py): its own URL, then gcloud's client
        assert got[name]["DCM_API_AUDIENCE"] == f"https://{name}.example,32555940559.apps.googleusercontent.com"
        assert got[name]["DCM_API_IAP_AUDIENCE"] == ""
    assert {name for name, env in got.items() if env.get("DCM_CALLBACK_KEYS_SECRET") == KEYS_SECRET} == \
        {"api", "notify"}
    assert {name for name, env in got.items() if "DCM_CALLBACK_KEYS_SECRET" in env} == {"api", "notify"}
    assert config.locals["callback_keys_secret_version"] == \
        "${google_secret_manager_secret.callback_keys.id}/versions/latest"


def test_local_mode_is_set_nowhere():
    for path in sorted(tf.TF_DIR.rglob("*.tf")) + [tf.TF_DIR / "terraform.tfvars.example"]:
        assert "DCM_LOCAL_MODE" not in json.dumps(tf.parse(path)), f"{path} sets DCM_LOCAL_MODE"
    # CI deploys with the same files; the emulator stack sets local mode itself (infra/local/stack.py).
    assert "DCM_LOCAL_MODE" not in (REPO_ROOT / "cloudbuild.yaml").read_text()


# ---- access ----------------------------------------------------------------


def test_nothing_is_public(config: tf.Config):
    # everything but the variables (api_invokers names the public members to refuse them)
    text = json.dumps({name: {k: v for k, v in doc.items() if k != "variable"} for name, doc in config.files.items()})
    text += "".join(json.dumps(tf.parse(p)) for p in tf.TF_DIR.rglob("examples/**/*.tf"))
    text += (tf.TF_DIR / "terraform.tfvars.example").read_text()
    for member in ("allUsers", "allAuthenticatedUsers"):
        assert member not in text
    iam = {key: body for key, body in config.resources.items() if "_iam_" in key[0]}
    assert not [k for k in iam if k[0].endswith(("_iam_policy", "_iam_binding"))], "additive members only"
    invokers = {k: b for k, b in iam.items() if b.get("role") in ("roles/run.invoker", "roles/cloudfunctions.invoker")}
    assert sorted(invokers) == [("google_cloud_run_v2_service_iam_member", "api_invoker"),
                                ("google_cloud_run_v2_service_iam_member", "push_invoker")]
    inv = invokers[("google_cloud_run_v2_service_iam_member", "push_invoker")]
    assert inv["for_each"] == "${local.push_functions}", "the push invoker may not invoke the api"
    assert inv["name"] == "${google_cloudfunctions2_function.function[each.key].name}"
    assert inv["member"] == "${google_service_account.push_invoker.member}"
    api = invokers[("google_cloud_run_v2_service_iam_member", "api_invoker")]
    assert "setproduct(keys(local.http_functions), var.api_invokers)" in api["for_each"]
    assert api["name"] == "${google_cloudfunctions2_function.function[each.value.function].name}"
    assert api["member"] == "${each.value.member}", "the members of api_invokers, and only those"
    assert config.variables["api_invokers"]["default"] == []


def test_push_and_http_functions_are_kept_apart(config: tf.Config, terraform):
    got = tf.evaluate({"push": "keys(local.push_functions)", "http": "keys(local.http_functions)",
                       "all": "keys(local.functions)"}, terraform=terraform)
    assert got["http"] == ["api"] and "api" not in got["push"]
    assert sorted(got["push"] + got["http"]) == sorted(got["all"])
    preconditions = block(config.resource("google_pubsub_subscription", "subscription"), "lifecycle")["precondition"]
    assert any("!try(local.functions[each.value.push].http, false)" in p["condition"] for p in preconditions), \
        "a plan refuses a subscription that pushes to an http function"


@pytest.mark.parametrize("members", [["allUsers"], ["allAuthenticatedUsers"], ["group:admins@example.com", "allUsers"],
                                     ["admin@example.com"], ["user:"], ["principalSet://iam.googleapis.com/x"],
                                     ["user:a@example.com", "user:a@example.com"]])
def test_api_invokers_refuse_public_and_malformed_members(terraform, members):
    with pytest.raises(AssertionError, match="api_invokers must"):
        tf.evaluate({"members": "var.api_invokers"}, {"api_invokers": members}, terraform)


def test_api_invokers_accept_iam_members(terraform):
    members = ["group:platform-admins@example.com", "user:alice@example.com",
               "serviceAccount:ops-bot@other-project.iam.gserviceaccount.com", "domain:example.com"]
    assert tf.evaluate({"members": "var.api_invokers"}, {"api_invokers": members}, terraform)["members"] == members
    assert tf.evaluate({"members": "var.api_invokers"}, terraform=terraform)["members"] == []


@pytest.mark.parametrize("variables, message", [({"api_iap_audience": "https://api.example"}, "api_iap_audience must"),
                                                ({"api_token_audiences": ["a,b"]}, "api_token_audiences:")])
def test_the_apis_token_audiences_are_checked_and_iap_needs_its_own(config: tf.Config, terraform, variables, message):
    """The api verifies its callers' tokens against these (shared/api/callers.py, docs/security.md item 14)."""
    with pytest.raises(AssertionError, match=message):
        tf.evaluate({"v": "var.api_iap_audience"}, variables, terraform)
    assert tf.evaluate({"v": "var.api_iap_audience"}, {"api_iap_audience": "/projects/123/global/backendServices/4"},
                       terraform)["v"] == "/projects/123/global/backendServices/4"
    preconditions = block(config.resource("google_cloudfunctions2_function", "function"), "lifecycle")["precondition"]
    assert any("!var.api_iap || var.api_iap_audience != \"\"" in p["condition"] for p in preconditions), \
        "a plan refuses api_iap without the audience of IAP's header"


def test_api_is_opened_through_iam_and_its_outputs_say_how(config: tf.Config):
    assert config.outputs["api_url"]["value"] == '${try(local.function_urls["api"], null)}'
    command = config.outputs["api_proxy_command"]["value"]
    assert command.startswith('${try("gcloud run services proxy ${local.functions["api"].name} ')
    assert "--region ${var.region} --project ${var.project_id} --port 8080" in command
    for doc in (REPO_ROOT / "README.md", REPO_ROOT / "docs" / "deploy.md", tf.TF_DIR / "api.tf"):
        text = " ".join(doc.read_text().split())
        assert "gcloud run services proxy" in text and "api_invokers" in text, doc
        assert 'Authorization: Bearer $(gcloud auth print-identity-token)' in text, doc


def test_publishers_are_scoped_to_their_topics(config: tf.Config):
    provider = config.resource("google_pubsub_topic_iam_member", "provider_publisher")
    assert provider["for_each"] == '${{for key, t in local.topics : key => t if t.key == "ingress"}}'
    assert provider["role"] == "roles/pubsub.publisher"
    assert provider["topic"] == "${google_pubsub_topic.topic[each.key].name}"
    assert provider["member"] == "${local.provider_publisher_members[each.value.provider]}"
    fn = config.resource("google_pubsub_topic_iam_member", "function_publisher")
    assert fn["for_each"] == "${local.function_publisher_grants}"
    assert fn["member"] == "${google_service_account.function[each.value.function].member}"
    project_roles = {b["role"] for (t, _), b in config.resources.items() if t == "google_project_iam_member"
                     if not b["role"].startswith("${")}
    assert "roles/pubsub.publisher" not in project_roles and "roles/editor" not in project_roles
    firestore = config.resource("google_project_iam_member", "function_firestore")
    assert firestore["role"] == "${local.firestore_roles[each.value.firestore]}"
    assert 'access.firestore != "none"' in firestore["for_each"]


def test_function_grants_follow_what_each_use_case_does(terraform):
    got = tf.evaluate({"grants": "local.function_publisher_grants", "access": "local.function_access",
                       "functions": "local.functions"}, terraform=terraform)
    http = set(topo.load().http_functions)
    publishes: dict[str, set[str]] = {name: set() for name in got["functions"]}
    for g in got["grants"].values():  # a per-provider topic's key is "{key}-{provider}"
        publishes[g["function"]].add(g["topic"].split("-", 1)[0])
    assert publishes["ingest"] == {"normalized", "deadletter"}
    lanes = {g["topic"] for g in got["grants"].values() if g["function"] == "ingest"} - {"deadletter"}
    assert lanes == {f"normalized-{p}" for p in topo.load().providers}  # every provider's lane to upsert
    assert publishes["upsert"] == {"changed", "deadletter"}
    # only upsert announces changes: no one else can set a change event's notify attribute (docs/security.md)
    assert [name for name, topics in publishes.items() if "changed" in topics] == ["upsert"]
    assert publishes["deadletter"] == set(), "the deadletter function must never publish (into its own topic)"
    for name, topics in publishes.items():
        assert not any(t.startswith("ingress") for t in topics), f"{name} may not pose as a provider"
        if name != "deadletter" and name not in http:
            assert "deadletter" in topics, f"{name} dead-letters what it rejects (shared/entrypoint.py)"
    firestore = {name: a["firestore"] for name, a in got["access"].items()}
    assert set(firestore.values()) <= {"none", "read", "append", "write"}
    assert firestore["ingest"] == "none"
    assert {firestore[n] for n in ("upsert", "deadletter", "billing", "notify", "sweep")} == {"write"}
    assert firestore["audit"] == "append", "audit only creates its records (shared/audit/handler.py)"
    assert publishes["notify"] == {"callbacks", "callbacks_retry", "deadletter"}, "both delivery lanes"
    # the api never publishes; it writes Firestore to register webhook callbacks (shared/callbacks/registry.py)
    assert http == {"api"} and firestore["api"] == "write" and not publishes["api"]


def test_firestore_grants_are_what_each_function_does_on_this_database_only(config: tf.Config, terraform):
    """Firestore IAM is per project (no per-collection IAM): each grant is kept to the stack's database by an IAM
    condition, and a function that only creates documents (audit) gets a role that cannot read one."""
    assert config.locals["firestore_roles"] == {"read": "roles/datastore.viewer",
                                                "append": "${google_project_iam_custom_role.firestore_append.name}",
                                                "write": "roles/datastore.user"}
    append = config.resource("google_project_iam_custom_role", "firestore_append")
    assert append["permissions"] == ["datastore.entities.create"], "create only: no get, list, update, delete"
    grant = config.resource("google_project_iam_member", "function_firestore")
    condition = block(grant, "condition")
    assert condition["expression"] == "${local.firestore_iam_condition}"
    got = tf.evaluate({"condition": "local.firestore_iam_condition"}, terraform=terraform)
    assert got["condition"] == 'resource.name == "projects/dcm-test-project/databases/(default)"'


def grants_to_functions(config: tf.Config) -> dict[tuple[str, str], dict]:
    """Every IAM grant whose member is a function's own service account."""
    return {key: body for key, body in config.resources.items()
            if "_iam_" in key[0] and "google_service_account.function[" in str(body.get("member", ""))}


def test_function_identities_have_no_grant_beyond_what_their_code_does(config: tf.Config):
    """The api (and every function) gets: Firestore on this database as function_access says, publisher on the
    topics it publishes to (none for the api), the keyring's secret if it holds the keys, Cloud Trace's agent
    (writes spans). No other role, and no project-wide role but Firestore's and Cloud Trace's (which Google
    grants per project or database only)."""
    grants = grants_to_functions(config)
    assert sorted(grants) == [("google_project_iam_member", "function_firestore"),
                              ("google_project_iam_member", "function_trace"),
                              ("google_pubsub_topic_iam_member", "function_publisher"),
                              ("google_secret_manager_secret_iam_member", "callback_keys_accessor")]
    firestore = grants[("google_project_iam_member", "function_firestore")]
    assert block(firestore, "condition")["expression"] == "${local.firestore_iam_condition}", \
        "the api's (and each function's) Firestore role reaches this stack's database only"
    assert grants[("google_project_iam_member", "function_trace")]["role"] == "roles/cloudtrace.agent"
    assert grants[("google_secret_manager_secret_iam_member", "callback_keys_accessor")]["role"] == \
        "roles/secretmanager.secretAccessor"
    api = (REPO_ROOT / "terraform" / "api.tf").read_text()
    assert "datastore.viewer" not in api, "api.tf must say what the api is granted (function_access: write)"


def test_only_notify_and_the_api_can_read_the_callback_keys(config: tf.Config, terraform):
    assert tf.evaluate({"fns": "local.callback_key_functions"}, terraform=terraform)["fns"] == ["api", "notify"]
    secret = config.resource("google_secret_manager_secret", "callback_keys")
    assert secret["secret_id"] == "${var.callback_keys_secret_id}"
    assert config.variables["callback_keys_secret_id"]["default"] == "dcm-callback-keys"
    assert block(secret, "replication") == {"auto": [{}]}
    accessor = config.resource("google_secret_manager_secret_iam_member", "callback_keys_accessor")
    assert accessor["for_each"] == "${toset(local.callback_key_functions)}"
    assert accessor["secret_id"] == "${google_secret_manager_secret.callback_keys.secret_id}"
    assert accessor["member"] == "${google_service_account.function[each.key].member}"
    # nothing else grants anything on a secret, or a Secret Manager role anywhere, but the NATS ingress's
    # grant on its own credential (tests/deploy/test_nats_ingress.py)
    secret_grants = [key for key, body in config.resources.items()
                     if key[0].startswith("google_secret_manager_secret_iam") or "secretmanager" in str(body.get("role"))]
    assert sorted(secret_grants) == [("google_secret_manager_secret_iam_member", "callback_keys_accessor"),
                                     ("google_secret_manager_secret_iam_member", "nats_credentials_accessor")]
    nats = config.resource("google_secret_manager_secret_iam_member", "nats_credentials_accessor")
    assert "callback_keys" not in nats["secret_id"] and nats["member"] == "${google_service_account.nats_ingress[0].member}"
    assert "secretmanager.googleapis.com" in tf.parse(tf.TF_DIR / "apis.tf")["locals"][0]["apis"]
    fn = config.resource("google_cloudfunctions2_function", "function")
    assert "${google_secret_manager_secret_iam_member.callback_keys_accessor}" in fn["depends_on"], \
        "a function starts once it may read its keys"


def test_the_first_keyring_is_32_random_bytes_that_terraform_never_destroys(config: tf.Config, terraform):
    key = config.resource("random_bytes", "callback_key")
    assert key["length"] == 32 and key["count"] == "${var.create_callback_keys_version ? 1 : 0}"
    version = config.resource("google_secret_manager_secret_version", "callback_keys_initial")
    assert version["secret"] == "${google_secret_manager_secret.callback_keys.id}"
    assert version["deletion_policy"] == "ABANDON", "destroying the resource must not destroy a key in use"
    assert block(version, "lifecycle")["ignore_changes"] == ["secret_data"], "rotation adds versions by hand"
    stand_in = base64.b64encode(bytes(range(32))).decode()
    keyring = json.loads(evaluate_with(version["secret_data"],
                                       {"random_bytes.callback_key[0].base64": f'"{stand_in}"'}, terraform))
    assert set(keyring) == {"primary", "keys"} and keyring["primary"] in keyring["keys"]
    assert [len(base64.b64decode(k)) for k in keyring["keys"].values()] == [32]
    versions = tf.parse(tf.TF_DIR / "versions.tf")["terraform"][0]["required_providers"][0]
    assert versions["random"] == {"source": "hashicorp/random", "version": "~> 3.6"}, "random_bytes: 3.6+"


def test_deploy_doc_says_who_reads_and_writes_what(terraform):
    """docs/deploy.md's access table names, for every function, the Firestore access Terraform grants it and
    whether it may read the webhook signing keys."""
    got = tf.evaluate({"access": "local.function_access"}, terraform=terraform)["access"]
    text = (REPO_ROOT / "docs" / "deploy.md").read_text()
    rows = {}
    for line in text.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")] if line.startswith("| `") else []
        if len(cells) >= 5 and cells[0].strip("`") in got:
            rows[cells[0].strip("`")] = cells
    assert set(rows) == set(got), f"docs/deploy.md: one row per function, got {sorted(rows)}"
    words = {"none": "none", "read": "read", "append": "create only", "write": "read and write"}
    for name, access in got.items():
        firestore, keys = rows[name][1], rows[name][4]
        assert firestore.startswith(words[access["firestore"]]), (name, firestore)
        assert keys.startswith("yes" if access["callback_keys"] else "no"), (name, keys)


def test_pubsub_service_agent_can_dead_letter(config: tf.Config):
    agent = "serviceAccount:service-${data.google_project.this.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    assert config.locals["pubsub_service_agent"] == agent
    # the agent of each subscription's project (the lanes project's for upsert's lanes: var.lanes_project)
    lanes = "serviceAccount:service-${data.google_project.lanes.number}@gcp-sa-pubsub.iam.gserviceaccount.com"
    assert config.locals["pubsub_service_agents"] == (
        "${merge({(var.project_id) = local.pubsub_service_agent}, {(local.lanes_project) = \"" + lanes + "\"})}")
    pub = config.resource("google_pubsub_topic_iam_member", "pubsub_agent_deadletter_publisher")
    assert "local.subscriptions" in pub["for_each"] and "s.dead_letter" in pub["for_each"]
    assert (pub["topic"], pub["role"], pub["member"]) == (
        "${google_pubsub_topic.topic[each.value.topic].name}", "roles/pubsub.publisher",
        "${local.pubsub_service_agents[each.value.project]}")
    sub = config.resource("google_pubsub_subscription_iam_member", "pubsub_agent_subscriber")
    assert sub["for_each"] == "${{for name, s in local.subscriptions : name => s if s.dead_letter}}"
    assert (sub["project"], sub["subscription"], sub["role"], sub["member"]) == (
        "${each.value.project}", "${google_pubsub_subscription.subscription[each.key].name}",
        "roles/pubsub.subscriber", "${local.pubsub_service_agents[each.value.project]}")
    mint = config.resource("google_service_account_iam_member", "pubsub_agent_mints_invoker_tokens")
    assert (mint["for_each"], mint["member"]) == ("${local.pubsub_service_agents}",
                                                  "${local.pubsub_service_agents[each.key]}")


def test_lanes_live_in_the_lanes_project_and_everything_else_here(terraform):
    """var.lanes_project moves the providers' lanes (topics and upsert's subscriptions) and nothing else;
    unset, everything is in project_id. The functions read it as DCM_LANES_PROJECT."""
    base = {"project_id": "main-project"}
    for variables, lanes in ((base, "main-project"), ({**base, "lanes_project": "lanes-project"}, "lanes-project")):
        got = tf.evaluate({"topics": "local.topics", "subscriptions": "local.subscriptions",
                           "lanes": "local.lanes_project"}, variables, terraform)
        assert got["lanes"] == lanes
        for t in got["topics"].values():
            assert t["project"] == (lanes if t["key"] == "normalized" else "main-project"), t
        for s in got["subscriptions"].values():
            assert s["project"] == (lanes if s["topic_key"] == "normalized" else "main-project"), s
    assert re.search(r"DCM_LANES_PROJECT += local\.lanes_project", (tf.TF_DIR / "functions.tf").read_text())


# ---- Firestore -------------------------------------------------------------


def test_firestore_ttl_policies_and_indexes(config: tf.Config, terraform):
    from shared.deadletter.store import DEADLETTERS
    from shared.state.documents import DELIVERIES, DUPLICATES, LEDGER

    got = tf.evaluate({"ttl": "local.firestore_ttl_fields", "indexes": "local.firestore_indexes",
                       "database": "local.firestore_database"}, terraform=terraform)
    assert got["ttl"] == {LEDGER: "expireAt", DUPLICATES: "expireAt", DEADLETTERS: "expireAt",
                          DELIVERIES: "expireAt"}
    for module in ("upsert/decide.py", "deadletter/store.py", "callbacks/store.py"):
        assert '"expireAt"' in (REPO_ROOT / "shared" / module).read_text(), f"shared/{module} writes expireAt"
    field = config.resource("google_firestore_field", "ttl")
    assert field["for_each"] == "${local.firestore_ttl_fields}"
    assert (field["collection"], field["field"]) == ("${each.key}", "${each.value}")
    assert block(field, "ttl_config") == {}
    assert field["database"] == "${local.firestore_database}"

    indexed = {(i["collection"], tuple((f["field_path"], f["order"]) for f in i["fields"]))
               for i in got["indexes"].values()}
    assert len(indexed) == len(got["indexes"]), "no index declared twice"
    for f in ("reason", "provider", "fingerprint"):
        assert (DEADLETTERS, ((f, "ASCENDING"), ("lastSeen", "DESCENDING"))) in indexed
    index = config.resource("google_firestore_index", "index")
    assert index["for_each"] == "${local.firestore_indexes}"
    assert dynamic(index, "fields")["for_each"] == "${each.value.fields}"

    db = config.resource("google_firestore_database", "database")
    assert got["database"] == "(default)" and db["name"] == "${local.firestore_database}"
    assert db["type"] == "FIRESTORE_NATIVE"


ASC, DESC = "ASCENDING", "DESCENDING"


@pytest.fixture(scope="module")
def indexed(terraform) -> set[tuple[str, tuple[tuple[str, str], ...]]]:
    """Terraform's composite indexes: (collection, ((field, order), ...))."""
    indexes = tf.evaluate({"indexes": "local.firestore_indexes"}, terraform=terraform)["indexes"]
    return {(i["collection"], tuple((f["field_path"], f["order"]) for f in i["fields"])) for i in indexes.values()}


def test_firestore_indexes_serve_the_resource_queries(indexed):
    """One composite index per equality field and ordering; Firestore merges them for several filters."""
    from dcm_status_contracts.status_changed import LABEL_KEYS

    from shared.api.queries import ResourceFilter
    from shared.state.documents import RESOURCES, SHARD

    # resources: equality on any filter field, sorted by -updatedAt, or searched by resourceId prefix
    resource_fields = {f for label in LABEL_KEYS
                       for f, _ in ResourceFilter("p", "t", "s", (label, "x")).equalities()}
    assert resource_fields == {"provider", "resourceType", "status",
                               "metadata.tenant", "metadata.region", "metadata.environment"}
    for f in resource_fields:  # updatedAt is sharded: queried over every shard at once
        assert (RESOURCES, ((f, ASC), (SHARD, ASC), ("updatedAt", DESC))) in indexed, f
        assert (RESOURCES, ((f, ASC), ("resourceId", ASC))) in indexed, f
    assert (RESOURCES, ((SHARD, ASC), ("updatedAt", DESC))) in indexed


def test_firestore_indexes_serve_the_change_feed_and_the_dead_letters(indexed):
    from shared.api.feed import FeedFilter
    from shared.state.documents import COMMITTED_AT, DEADLETTERS, LEDGER, SHARD

    # events (the change feed): equality filters, commit order both ways (the latest N descending)
    feed_fields = {f for f, _ in FeedFilter("p", "t", "s").equalities()}
    assert feed_fields == {"provider", "resourceType", "status"}
    for order in (ASC, DESC):  # committedAt is sharded
        assert (LEDGER, ((SHARD, ASC), (COMMITTED_AT, order))) in indexed, order
        for f in feed_fields:
            assert (LEDGER, ((f, ASC), (SHARD, ASC), (COMMITTED_AT, order))) in indexed, (f, order)
    # dead letters: newest first, by provider or reason
    for f in ("provider", "reason"):
        assert (DEADLETTERS, ((f, ASC), ("lastSeen", DESC))) in indexed, f


def test_firestore_indexes_serve_the_sweep_the_history_and_the_stats(indexed):
    from shared.state.documents import HISTORY, LEDGER, RESOURCES, SHARD, STALE_SHARD

    # the sweep: a provider's resource with the newest freshness deadline (is the provider silent?)
    assert (RESOURCES, (("provider", ASC), (SHARD, ASC), ("staleAt", DESC))) in indexed
    # the sweep: the resources past their deadline, oldest deadline first (staleAt's own shard field)
    assert (RESOURCES, ((STALE_SHARD, ASC), ("staleAt", ASC))) in indexed
    # the sweep: hot resources, the documents written longest ago first
    assert (RESOURCES, (("hot", ASC), (SHARD, ASC), ("writtenAt", ASC))) in indexed
    # a hot resource's latest ledger entries (shared/state/resources.py)
    assert (LEDGER, (("key", ASC), ("processedAt", DESC))) in indexed
    # history: a resource's ledger entries (issue 32), newest observation first, and ?at= by recordedAt
    assert (LEDGER, (("key", ASC), ("observedAt", DESC))) in indexed
    assert (LEDGER, (("key", ASC), ("recordedAt", DESC))) in indexed
    assert HISTORY not in {c for c, _ in indexed}  # the old subcollection: read by the backfill only
    # /v1/stats: the history entries of its window by outcome, every shard (recordedAt is sharded)
    assert (LEDGER, (("outcome", ASC), (SHARD, ASC), ("recordedAt", ASC))) in indexed


def test_every_firestore_index_is_an_equality_the_shard_if_sharded_and_one_ordering(indexed):
    from shared.state.documents import SHARD, STALE_SHARD

    for collection, fields in indexed:  # equality field first, the shard field if sharded, then the one ordering
        assert fields[0][1] == ASC and fields[-1][0] not in (fields[0][0], SHARD, STALE_SHARD), (collection, fields)
        assert len(fields) == 2 or (len(fields) == 3 and fields[1] == (SHARD, ASC)), (collection, fields)


def test_no_sequential_field_is_indexed_but_behind_a_shard(config: tf.Config, terraform):
    """The fields written at the event rate with increasing values: the data model declares the very list
    the code (and benchmarks/capacity.py) knows; each has its single-field index exempted; a composite
    index orders by it only behind the shard field (or a resource's key: one resource's entries)."""
    from shared.state.documents import SEQUENTIAL_FIELDS, SHARD, SHARD_FIELDS, SHARDED, UNFILTERED_FIELDS

    got = tf.evaluate({"sequential": "local.firestore_sequential_fields", "shard": "local.firestore_shard_field",
                       "shard_fields": "local.firestore_shard_fields", "unfiltered": "local.firestore_unfiltered_fields",
                       "unindexed": "local.firestore_unindexed_fields", "indexes": "local.firestore_indexes",
                       "ttl": "local.firestore_ttl_fields"}, terraform=terraform)
    assert got["sequential"] == SEQUENTIAL_FIELDS and got["shard"] == SHARD
    assert {c: tuple(f) for c, f in got["unfiltered"].items()} == UNFILTERED_FIELDS
    assert {c: set(f) for c, f in got["shard_fields"].items()} == {c: set(f) for c, f in SHARD_FIELDS.items()}
    exempt = {(v["collection"], v["field"]) for v in got["unindexed"].values()}
    assert exempt == ({(c, f) for c, fields in SEQUENTIAL_FIELDS.items() for f in fields}
                      | {(c, f) for c, fields in UNFILTERED_FIELDS.items() for f in fields})
    for index in got["indexes"].values():  # an unfiltered field is in no index either
        paths = {f["field_path"] for f in index["fields"]}
        assert not paths & set(UNFILTERED_FIELDS.get(index["collection"], ())), (index["collection"], paths)
    assert not exempt & set(got["ttl"].items()), "a field has one configuration: the TTL ones are exempt there"
    for index in got["indexes"].values():
        paths = [f["field_path"] for f in index["fields"]]
        for i, path in enumerate(paths):
            if path in SEQUENTIAL_FIELDS.get(index["collection"], {}):
                in_front = (*SHARD_FIELDS[index["collection"]], "key")
                assert i > 0 and paths[i - 1] in in_front, (index["collection"], paths)
    sharded = {(c, f) for c, fields in SEQUENTIAL_FIELDS.items() for f, how in fields.items() if how == SHARDED}
    ordered = {(i["collection"], i["fields"][-1]["field_path"]) for i in got["indexes"].values()}
    assert sharded <= ordered, "a sharded field is one a query orders by"
    field = config.resource("google_firestore_field", "unindexed")
    assert field["for_each"] == "${local.firestore_unindexed_fields}"
    assert (field["collection"], field["field"]) == ("${each.value.collection}", "${each.value.field}")
    assert block(field, "index_config") == {} and "ttl_config" not in field


def test_collection_group_queries_have_their_single_field_indexes(config: tf.Config, terraform):
    """Firestore keeps no collection-group index by default: every field billing's report filters the
    ``transitions`` collection group on has one declared (ascending, collection-group scope), and no other."""
    from shared.billing.store import GROUP_FILTER_FIELDS, TRANSITIONS

    got = tf.evaluate({"fields": "local.firestore_collection_group_fields",
                       "indexed": "local.firestore_collection_group_indexed"}, terraform=terraform)
    assert got["fields"] == {TRANSITIONS: list(GROUP_FILTER_FIELDS)}
    assert {(v["collection"], v["field"]) for v in got["indexed"].values()} == {
        (TRANSITIONS, f) for f in GROUP_FILTER_FIELDS}
    field = config.resource("google_firestore_field", "collection_group")
    assert field["for_each"] == "${local.firestore_collection_group_indexed}"
    assert (field["collection"], field["field"]) == ("${each.value.collection}", "${each.value.field}")
    assert block(block(field, "index_config"), "indexes") == {"order": "ASCENDING", "query_scope": "COLLECTION_GROUP"}
    assert "ttl_config" not in field


# ---- module hygiene --------------------------------------------------------


def test_provider_pinned_and_state_in_gcs(config: tf.Config):
    versions = tf.parse(tf.TF_DIR / "versions.tf")["terraform"][0]
    google = versions["required_providers"][0]["google"] if isinstance(
        versions["required_providers"], list) else versions["required_providers"]["google"]
    assert google["source"] == "hashicorp/google"
    assert re.fullmatch(r"~> 6\.\d+", google["version"]), google["version"]
    backend = tf.parse(tf.TF_DIR / "backend.tf")["terraform"][0]["backend"]
    assert "gcs" in (backend[0] if isinstance(backend, list) else backend)


def test_variables_typed_and_described_outputs_described(config: tf.Config):
    for name, v in config.variables.items():
        assert v.get("description"), f"variable {name} has no description"
        assert v.get("type"), f"variable {name} has no type"
    for name, o in config.outputs.items():
        assert o.get("description"), f"output {name} has no description"


def test_example_tfvars_and_examples_use_declared_variables(config: tf.Config):
    example = tf.parse(tf.TF_DIR / "terraform.tfvars.example")
    assert set(example) <= set(config.variables), set(example) - set(config.variables)
    assert "project_id" in example
    examples = sorted((tf.TF_DIR / "examples").glob("*/main.tf"))
    assert examples, "terraform/examples/<scenario>/ is missing"
    for path in examples:
        for module in tf.parse(path).get("module", []):
            for name, args in module.items():
                assert args["source"] == "../..", f"{path}: module {name}"
                inputs = set(args) - {"source", "providers", "depends_on"}
                assert inputs <= set(config.variables), f"{path}: unknown inputs {inputs - set(config.variables)}"
                required = {n for n, v in config.variables.items() if "default" not in v}
                assert required <= inputs, f"{path}: missing required inputs {required - inputs}"


def test_pure_files_use_no_resources():
    """topology.tf and data_model.tf must stay evaluable without providers."""
    for name in tf.PURE_FILES:
        text = json.dumps(tf.parse(tf.TF_DIR / name))
        assert not re.search(r"\b(google_[a-z0-9_]+\.|data\.)", text), f"{name} references a resource"
        assert "resource" not in tf.parse(tf.TF_DIR / name)


def test_hcl_files_all_parse():
    for path in sorted(Path(tf.TF_DIR).rglob("*.tf")):
        tf.parse(path)


def test_one_provider_name_rule_in_terraform_the_contracts_the_cli_and_the_docs():
    from dcm_status_contracts.identity import PROVIDER_NAME, PROVIDER_NAME_PATTERN

    variables = (Path(__file__).resolve().parents[2] / "terraform" / "variables.tf").read_text()
    assert f'can(regex("{PROVIDER_NAME_PATTERN}", p))' in variables
    deploy = (Path(__file__).resolve().parents[2] / "docs" / "deploy.md").read_text()
    assert "2–22 characters" in " ".join(deploy.split())
    assert all(PROVIDER_NAME.match(p) for p in topo.load().providers)  # every declared provider obeys it
    for bad in ("AWS", "a", "aws!", "-aws", "aws-", "1aws", "a" * 23):
        assert not PROVIDER_NAME.match(bad)
