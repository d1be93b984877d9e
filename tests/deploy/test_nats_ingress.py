"""The NATS ingress in production (terraform/nats_ingress.tf, functions/nats_ingress/Dockerfile, docs/nats.md).

Deployed only when ``nats_url`` is set: a Cloud Run service that never scales to zero, has CPU always
allocated and no invoker, whose own service account may publish to the providers' ingress topics and the
dead-letter topic only and read its NATS credential; its settings come from the ``nats:`` section of
infra/topology.yaml, as the local stack's do.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from infra import package
from infra import topology as topo
from tests.deploy import tf
from tests.deploy.tf import REPO_ROOT, block, dynamic

SERVICE = ("google_cloud_run_v2_service", "nats_ingress")
INGRESS_SA = "google_service_account.nats_ingress[0]"
DOCKERFILE = REPO_ROOT / "functions" / "nats_ingress" / "Dockerfile"
URL = "tls://nats.example.com:4222"


def nats_section() -> dict:
    return yaml.safe_load(topo.TOPOLOGY_FILE.read_text())["nats"]


def ingress_env(config: tf.Config, terraform: str, **variables) -> dict[str, str]:
    """local.nats_ingress_env as Terraform computes it (topology.tf: variables and functions only)."""
    return tf.evaluate({"value": "local.nats_ingress_env"}, {"nats_url": URL, **variables}, terraform)["value"]


def grants_to_the_ingress(config: tf.Config) -> dict[tuple[str, str], dict]:
    return {key: body for key, body in config.resources.items()
            if "_iam_" in key[0] and INGRESS_SA in str(body.get("member", ""))}


# ---- settings ------------------------------------------------------------------------


def test_stream_subject_and_consumer_come_from_the_topology(terraform):
    got = tf.evaluate({"env": "local.nats_env"}, terraform=terraform)["env"]
    assert got == topo.load().nats.env(), "the settings the local stack gives its ingress (NatsSpec.env())"
    nats = nats_section()
    assert (got["NATS_STREAM_NAME"], got["NATS_STATUS_SUBJECT"], got["NATS_CONSUMER_NAME"]) == (
        nats["stream"], nats["subjects"], nats["consumer"])
    assert got["NATS_PROVIDER_PREFIX"] == nats["provider_prefix"] and "{provider}" in got["NATS_PROVIDER_PREFIX"]
    assert (got["NATS_ACK_WAIT_SECONDS"], got["NATS_MAX_DELIVER"]) == (
        str(nats["ack_wait_seconds"]), str(nats["max_deliver"]))
    assert got["NATS_MAX_AGE_SECONDS"] == str(topo.seconds(nats["max_age"]))


def test_the_topology_edit_reaches_terraform(terraform, tmp_path):
    doc = topo.read()
    doc["nats"].update(stream="dcm-other-{provider}", consumer="ingress-2", max_deliver=9, max_age="3600s",
                       max_bytes=1024, max_ack_pending=50)
    path = tmp_path / "topology.yaml"
    path.write_text(yaml.safe_dump(doc))
    got = tf.evaluate({"env": "local.nats_env"}, {"topology_file": str(path)}, terraform)["env"]
    assert got == topo.load(path=path).nats.env()
    assert (got["NATS_STREAM_NAME"], got["NATS_CONSUMER_NAME"], got["NATS_MAX_DELIVER"],
            got["NATS_MAX_AGE_SECONDS"]) == ("dcm-other-{provider}", "ingress-2", "9", "3600")
    assert (got["NATS_PROVIDER_MAX_BYTES"], got["NATS_MAX_ACK_PENDING"]) == ("1024", "50")


def test_the_ingress_gets_the_functions_settings_and_its_own(config, terraform):
    env = ingress_env(config, terraform, nats_user="dcm-ingress")
    assert {k: env[k] for k in topo.load().env()} == topo.load().env(), "topics and providers as the functions"
    assert env["DCM_PROJECT"] == "dcm-test-project" and env["NATS_URL"] == URL and env["NATS_USER"] == "dcm-ingress"
    assert {k: v for k, v in env.items() if k.startswith("NATS_")} == {
        **tf.evaluate({"env": "local.nats_env"}, terraform=terraform)["env"], "NATS_URL": URL,
        "NATS_USER": "dcm-ingress"}
    assert "NATS_PASSWORD" not in env and "NATS_CREDS" not in env, "the password comes from Secret Manager only"
    assert "DCM_LOCAL_MODE" not in env


def test_a_creds_file_is_mounted_and_named_not_passed(config, terraform):
    env = ingress_env(config, terraform, nats_credentials_kind="creds")
    assert "NATS_USER" not in env and "NATS_PASSWORD" not in env
    locals_ = config.locals
    assert env["NATS_CREDS"] == f"{locals_['nats_creds_dir']}/{locals_['nats_creds_file']}"
    container = block(block(config.resource(*SERVICE), "template"), "containers")
    mount = block(dynamic(container, "volume_mounts"), "content")
    assert mount["mount_path"] == "${local.nats_creds_dir}"
    volume = block(dynamic(block(config.resource(*SERVICE), "template"), "volumes"), "content")
    secret = block(volume, "secret")
    assert secret["secret"] == "${google_secret_manager_secret.nats_credentials[0].secret_id}"
    assert block(secret, "items") == {"version": "latest", "path": "${local.nats_creds_file}"}


# Tuning whose code default is the production value (shared/runtime/nats_settings.py nats_from_env).
TUNED_BY_DEFAULT = {"NATS_BATCH", "NATS_PUBLISH_TIMEOUT_SECONDS"}


def test_every_nats_setting_the_worker_reads_is_set(config, terraform):
    """What shared/ reads from NATS_* is set by Terraform: by value, or from the secret (the password, the
    creds file's path), but the tuning whose default holds (a Pub/Sub publish times out well within
    ack_wait, so JetStream never redelivers a message still being published)."""
    from shared.runtime.nats_settings import nats_from_env

    defaults = nats_from_env({"NATS_URL": URL})
    assert defaults.publish_timeout_seconds < int(nats_section()["ack_wait_seconds"])
    read_by_code = set()
    for path in (REPO_ROOT / "shared").rglob("*.py"):
        read_by_code |= set(re.findall(r'(?:environ\.get|env\.get|_int|_text|_flag)\(\s*(?:env,\s*)?"(NATS_[A-Z0-9_]+)"',
                                       path.read_text()))
    password = ingress_env(config, terraform, nats_user="u")
    creds = ingress_env(config, terraform, nats_credentials_kind="creds")
    set_here = set(password) | set(creds) | {"NATS_PASSWORD"} | TUNED_BY_DEFAULT
    assert read_by_code <= set_here, sorted(read_by_code - set_here)


# ---- the service ------------------------------------------------------------------------


def test_deployed_only_with_a_nats_url_never_scaled_to_zero_cpu_always_on(config: tf.Config):
    assert config.locals["nats_ingress_enabled"] == "${var.nats_url != null}"
    service = config.resource(*SERVICE)
    assert service["count"] == "${local.nats_ingress_enabled ? 1 : 0}"
    template = block(service, "template")
    assert block(template, "scaling") == {
        "min_instance_count": "${var.nats_ingress_sizing.min_instance_count}",
        "max_instance_count": "${var.nats_ingress_sizing.max_instance_count}"}
    resources = block(block(template, "containers"), "resources")
    assert resources["cpu_idle"] is False, "CPU always allocated: it pulls between requests (there are none)"
    assert template["service_account"] == "${google_service_account.nats_ingress[0].email}"
    for resource in ("google_service_account", "google_secret_manager_secret",
                     "google_secret_manager_secret_iam_member"):
        assert config.resource(resource, "nats_ingress" if resource == "google_service_account" else
                               "nats_credentials" if resource == "google_secret_manager_secret" else
                               "nats_credentials_accessor")["count"] == "${local.nats_ingress_enabled ? 1 : 0}"


@pytest.mark.parametrize("sizing", [{"min_instance_count": 0}, {"min_instance_count": 2, "max_instance_count": 1}])
def test_sizing_refuses_scale_to_zero(terraform, sizing):
    with pytest.raises(AssertionError, match="nats_ingress_sizing"):
        tf.evaluate({"s": "var.nats_ingress_sizing"}, {"nats_ingress_sizing": sizing}, terraform)
    got = tf.evaluate({"s": "var.nats_ingress_sizing"}, terraform=terraform)["s"]
    assert (got["min_instance_count"], got["max_instance_count"]) == (1, 1)


def test_nobody_may_invoke_it_and_cloud_run_probes_its_health(config: tf.Config):
    service = config.resource(*SERVICE)
    assert service["ingress"] == "INGRESS_TRAFFIC_INTERNAL_ONLY"
    assert "invoker_iam_disabled" not in service, "Cloud Run's IAM check stays on"
    invokers = [key for key, body in config.resources.items() if "nats_ingress" in str(body.get("name", ""))
                and body.get("role") == "roles/run.invoker"]
    assert invokers == [] and not [k for k in config.resources if k[0].startswith("google_cloud_run_v2_service_iam")
                                   and "nats" in k[1]]
    probe = block(block(block(service, "template"), "containers"), "liveness_probe")
    assert block(probe, "http_get") == {"path": "/healthz"}


def test_the_password_comes_from_secret_manager_and_terraform_never_holds_it(config: tf.Config):
    container = block(block(config.resource(*SERVICE), "template"), "containers")
    envs = container["dynamic"]
    plain = next(d["env"] for d in envs if "env" in d and d["env"]["for_each"] == "${local.nats_ingress_env}")
    assert block(plain, "content") == {"name": "${env.key}", "value": "${env.value}"}
    secret = next(d["env"] for d in envs if "env" in d and d["env"] is not plain)
    assert "NATS_PASSWORD" in secret["for_each"]
    ref = block(block(block(secret, "content"), "value_source"), "secret_key_ref")
    assert ref == {"secret": "${google_secret_manager_secret.nats_credentials[0].secret_id}", "version": "latest"}
    assert not [k for k in config.resources if k[0] == "google_secret_manager_secret_version" and "nats" in k[1]], \
        "an operator adds the credential (docs/nats.md): never in the Terraform state"
    assert config.variables["nats_credentials_secret_id"]["default"] == "dcm-nats-ingress-credentials"


def test_a_plan_without_an_image_or_user_says_what_to_set(config: tf.Config):
    conditions = [p["condition"] for p in block(config.resource(*SERVICE), "lifecycle")["precondition"]]
    assert "${var.nats_ingress_image != null}" in conditions
    assert '${var.nats_credentials_kind != "password" || var.nats_user != null}' in conditions


# ---- least privilege ------------------------------------------------------------------------


@pytest.mark.parametrize("providers", [None, ["aws", "gcp"]], ids=["declared-providers", "other-providers"])
def test_the_ingress_may_publish_to_the_ingress_topics_and_the_deadletter_topic_only(terraform, providers):
    got = tf.evaluate({"publishes": "local.nats_ingress_publishes", "topics": "local.topics"},
                      {"cloud_providers": providers} if providers else {}, terraform)
    names = {got["topics"][key]["name"] for key in got["publishes"]}
    declared = topo.load(providers)
    assert names == {declared.topic("ingress", p) for p in declared.providers} | {declared.topic("deadletter")}
    for forbidden in ("normalized", "changed", "replay", "callbacks", "providers"):
        assert not any(got["topics"][key]["key"] == forbidden for key in got["publishes"]), forbidden


def test_the_ingress_identity_has_no_other_grant(config: tf.Config):
    grants = grants_to_the_ingress(config)
    assert sorted(grants) == [("google_project_iam_member", "nats_ingress_trace"),
                              ("google_pubsub_topic_iam_member", "nats_ingress_publisher"),
                              ("google_secret_manager_secret_iam_member", "nats_credentials_accessor")]
    assert grants[("google_project_iam_member", "nats_ingress_trace")]["role"] == "roles/cloudtrace.agent"
    publisher = grants[("google_pubsub_topic_iam_member", "nats_ingress_publisher")]
    assert publisher["for_each"] == "${local.nats_ingress_enabled ? toset(local.nats_ingress_publishes) : toset([])}"
    assert (publisher["topic"], publisher["role"]) == ("${google_pubsub_topic.topic[each.key].name}",
                                                      "roles/pubsub.publisher")
    accessor = grants[("google_secret_manager_secret_iam_member", "nats_credentials_accessor")]
    assert (accessor["secret_id"], accessor["role"]) == (
        "${google_secret_manager_secret.nats_credentials[0].secret_id}", "roles/secretmanager.secretAccessor")
    # and no one else may read its credential
    on_secret = [key for key, body in config.resources.items() if key[0].startswith("google_secret_manager_secret_iam")
                 and "nats_credentials" in str(body.get("secret_id"))]
    assert on_secret == [("google_secret_manager_secret_iam_member", "nats_credentials_accessor")]


# ---- variables ------------------------------------------------------------------------------


@pytest.mark.parametrize("url", ["tls://user:secret@nats.example.com:4222", "http://nats.example.com:4222",
                                 "nats.example.com:4222", "tls://a.example.com:4222, tls://u:p@b.example.com"])
def test_nats_url_refuses_credentials_and_other_schemes(terraform, url):
    with pytest.raises(AssertionError, match="nats_url must"):
        tf.evaluate({"u": "var.nats_url"}, {"nats_url": url}, terraform)


def test_nats_url_accepts_a_cluster(terraform):
    urls = "tls://nats-1.example.com:4222,tls://nats-2.example.com:4222"
    assert tf.evaluate({"u": "var.nats_url"}, {"nats_url": urls}, terraform)["u"] == urls
    assert tf.evaluate({"u": "var.nats_url"}, terraform=terraform)["u"] is None, "no NATS ingress by default"


@pytest.mark.parametrize("image", ["nats-ingress", "europe-west1-docker.pkg.dev/p/r/nats-ingress@sha256:abc",
                                   "europe-west1-docker.pkg.dev/p/r/nats-ingress"])
def test_the_image_is_named_by_digest_or_tag(terraform, image):
    with pytest.raises(AssertionError, match="nats_ingress_image must"):
        tf.evaluate({"i": "var.nats_ingress_image"}, {"nats_ingress_image": image}, terraform)
    good = "europe-west1-docker.pkg.dev/p/dcm-status-images/nats-ingress@sha256:" + "a" * 64
    assert tf.evaluate({"i": "var.nats_ingress_image"}, {"nats_ingress_image": good}, terraform)["i"] == good


# ---- the image ----------------------------------------------------------------------------


def dockerfile() -> list[tuple[str, str]]:
    """(instruction, arguments) of functions/nats_ingress/Dockerfile, continuation lines joined."""
    text = re.sub(r"\\\n", " ", DOCKERFILE.read_text())
    lines = [line.strip() for line in text.splitlines() if line.strip() and not line.lstrip().startswith("#")]
    return [(line.split(None, 1)[0].upper(), line.split(None, 1)[1]) for line in lines]


def test_the_image_holds_what_a_deploy_zip_of_the_worker_would(config: tf.Config):
    instructions = dockerfile()
    copies = dict(args.split() for op, args in instructions if op == "COPY")
    copied = {source.rstrip("/") for source in copies} - {"pyproject.toml"}
    shared = {f"shared/{name}" for name in package.SHARED_FOR_ALL + ("nats_ingress",)}
    assert copied == shared | {"shared/__init__.py", "shared/contracts", "schemas", "functions/nats_ingress/main.py"}
    # the contracts as a zip carries them: under their one import name, the schemas inside (shared.contracts refuses)
    assert copies["shared/contracts/"] == f"{package.CONTRACTS}/"
    assert copies["schemas/"] == f"{package.CONTRACTS}/schemas/"
    run = " ".join(args for op, args in instructions if op == "RUN")
    assert "['dependencies']" in run, "the runtime dependencies of pyproject.toml, as infra/package.py writes them"
    assert f"startswith('{package.CONTRACTS_DIST}')" in run, "no index has the contracts: they are carried as source"
    assert "-name samples" in run and "-name __pycache__" in run and "setup.py" in run


def test_the_image_runs_the_worker_unprivileged_on_the_functions_python():
    instructions = dict((op, args) for op, args in dockerfile())
    assert instructions["CMD"] == '["python", "-m", "functions.nats_ingress.main"]'
    user = instructions["USER"].split(":")[0]
    assert user not in ("root", "0"), "never root"
    python = re.match(r"python:(\d+\.\d+)-", instructions["FROM"]).group(1)
    assert f"python{python.replace('.', '')}" == tf.load().variables["runtime"]["default"], "the functions' Python"


def image_layout(root: Path) -> Path:
    """The image's /app, laid out by following the Dockerfile's COPY instructions (and its RUN's removals)."""
    app = root / "app"
    for op, args in dockerfile():
        if op != "COPY" or args.split()[0] == "pyproject.toml":
            continue
        source, target = args.split()
        src, dst = REPO_ROOT / source.rstrip("/"), app / target
        if src.is_dir():
            shutil.copytree(src, dst, ignore=shutil.ignore_patterns("__pycache__"))
        else:
            dst.mkdir(parents=True, exist_ok=True)
            shutil.copy(src, dst / src.name)
    for samples in list(app.rglob("samples")):
        shutil.rmtree(samples)
    for build_file in ("setup.py", "pyproject.toml", "README.md"):
        (app / package.CONTRACTS / build_file).unlink(missing_ok=True)
    for egg_info in list((app / package.CONTRACTS).glob("*.egg-info")):
        shutil.rmtree(egg_info)
    return app


STARTS = """
import json, runpy, sys, threading, time, urllib.error, urllib.request
sys.path.insert(0, ".")
port = sys.argv[1]
def probe():
    for _ in range(600):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=2)
        except urllib.error.HTTPError as answer:
            def files(mod):  # a namespace package (functions/) has a path, no file
                return [mod.__file__] if getattr(mod, "__file__", None) else list(getattr(mod, "__path__", [""]))
            outside = sorted(m for m, mod in list(sys.modules.items()) if m.split(".")[0] in ("shared", "functions", "infra", "dcm_status_contracts")
                             and not all(f.startswith(sys.path[0]) for f in files(mod)))
            print(json.dumps({"status": answer.code, "body": json.loads(answer.read()), "outside": outside}))
            sys.stdout.flush()
            import os; os._exit(0)
        except OSError:
            time.sleep(0.1)
    import os; os._exit(1)
threading.Thread(target=probe, daemon=True).start()
runpy.run_module("functions.nats_ingress.main", run_name="__main__")
"""


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_the_image_layout_starts_and_answers_the_probe_with_nothing_from_the_repository(tmp_path):
    """The worker, from the image's files alone (no other shared package, no infra/), starts and answers
    Cloud Run's probe: 503 while NATS is unreachable (here: nothing listens), with its last error."""
    app = image_layout(tmp_path)
    port, nowhere = free_port(), free_port()
    env = {"PATH": os.environ.get("PATH", ""), "PORT": str(port), "NATS_URL": f"nats://127.0.0.1:{nowhere}",
           "DCM_PROJECT": "dcm-test-project", "PUBSUB_EMULATOR_HOST": f"127.0.0.1:{free_port()}",
           **topo.load().env(), **topo.load().nats.env()}
    proc = subprocess.run([sys.executable, "-I", "-c", STARTS.replace('sys.path.insert(0, ".")',
                                                                      f"sys.path.insert(0, {str(app)!r})"), str(port)],
                          cwd=app, env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    answer = json.loads(proc.stdout.strip().splitlines()[-1])
    assert answer["status"] == 503 and answer["body"]["connected"] is False
    assert answer["outside"] == [], "every module of ours comes from the image's files"
