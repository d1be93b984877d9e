"""cloudbuild.yaml: every stage of the pipeline, in order, and apply on the deploy branch only."""

from __future__ import annotations

import yaml

from tests.deploy.tf import REPO_ROOT

STAGES = ["lint", "unit", "e2e", "package", "nats-ingress-image", "terraform-init", "terraform-fmt", "terraform-validate",
          "terraform-plan", "terraform-apply"]


def pipeline() -> dict:
    return yaml.safe_load((REPO_ROOT / "cloudbuild.yaml").read_text())


def script(step: dict) -> str:
    return " ".join(step.get("args", []))


def test_every_stage_is_there_in_order():
    steps = pipeline()["steps"]
    ids = [s["id"] for s in steps]
    assert [i for i in ids if i in STAGES] == STAGES
    by_id = {s["id"]: s for s in steps}
    assert "tests/e2e" in script(by_id["e2e"]) and "install-emulators.sh" in script(by_id["e2e"])
    assert "tests/unit" in script(by_id["unit"]) and "tests/deploy" in script(by_id["unit"])
    assert "infra.package --out build/" in script(by_id["package"])
    assert set(by_id["package"]["waitFor"]) == {"lint", "unit", "e2e"}, "package only what passed"
    lint = script(by_id["lint"])
    assert "terraform fmt -check" in lint and "checkov -d terraform" in lint


def test_state_in_gcs_and_apply_only_on_the_deploy_branch():
    doc = pipeline()
    by_id = {s["id"]: s for s in doc["steps"]}
    init = script(by_id["terraform-init"])
    assert "-backend-config=bucket=${_TF_STATE_BUCKET}" in init and "-backend-config=prefix=${_TF_STATE_PREFIX}" in init
    assert "-out=tfplan" in script(by_id["terraform-plan"])
    apply = script(by_id["terraform-apply"])
    assert '[ "$BRANCH_NAME" = "${_DEPLOY_BRANCH}" ]' in apply and "apply tfplan" in apply
    assert doc["substitutions"]["_DEPLOY_BRANCH"] == "main"
    assert [s["id"] for s in doc["steps"]][-1] == "terraform-apply"
    for s in doc["steps"]:
        if s["id"] != "terraform-apply":
            assert "apply" not in script(s).replace("apply tfplan", "").split(), s["id"]


def test_the_nats_ingress_image_is_built_always_pushed_on_demand_and_deployed_by_digest():
    """terraform/nats_ingress.tf: the image is built on every run from functions/nats_ingress/Dockerfile,
    pushed to the stack's repository only with _NATS_INGRESS=1, and the plan takes it by digest."""
    doc = pipeline()
    by_id = {s["id"]: s for s in doc["steps"]}
    image = by_id["nats-ingress-image"]
    assert set(image["waitFor"]) == {"lint", "unit", "e2e"}, "an image only of what passed"
    build = script(image)
    assert 'docker build -f functions/nats_ingress/Dockerfile -t "$$IMAGE" .' in build
    assert "${_REGION}-docker.pkg.dev/$PROJECT_ID/${_IMAGE_REPOSITORY}/nats-ingress:$BUILD_ID" in build
    push = build.index("docker push")
    assert build.rindex('if [ "${_NATS_INGRESS}" = "1" ]', 0, push) > build.index("docker build"), "pushed on demand"
    assert "RepoDigests" in build[push:] and "/workspace/nats_ingress_image" in build[push:]
    assert doc["substitutions"]["_NATS_INGRESS"] == "", "no NATS ingress unless asked for"
    assert doc["substitutions"]["_IMAGE_REPOSITORY"] == "dcm-status-images", "terraform: <name_prefix>-images"
    assert "nats-ingress-image" in by_id["terraform-init"]["waitFor"]
    plan = script(by_id["terraform-plan"])
    assert "-var nats_ingress_image=$$(cat /workspace/nats_ingress_image)" in plan and "$$IMAGE_VAR" in plan
