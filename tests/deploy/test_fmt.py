"""`terraform fmt -check`: the Terraform code is canonically formatted."""

from __future__ import annotations

import os
import subprocess

from tests.deploy import tf


def test_terraform_fmt_check(terraform):
    proc = subprocess.run([terraform, "fmt", "-check", "-recursive", "-diff", "terraform"], cwd=tf.REPO_ROOT,
                          capture_output=True, text=True, timeout=60,
                          env={**os.environ, "TF_CLI_CONFIG_FILE": os.devnull, "CHECKPOINT_DISABLE": "1"})
    assert proc.returncode == 0, f"run `terraform fmt -recursive terraform`:\n{proc.stdout}{proc.stderr}"
