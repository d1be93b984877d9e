"""Read the Terraform configuration two ways, both offline.

- ``load()`` parses every ``terraform/*.tf`` with python-hcl2 into resources,
  locals, variables, outputs: the structure of the configuration.
- ``evaluate()`` runs the real ``terraform console`` over the files that use
  only variables and functions (``PURE_FILES``: the expansion of
  infra/topology.yaml and the Firestore data model). It needs no provider and
  no ``terraform init``, and returns the very values Terraform would use.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import tempfile
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import hcl2

REPO_ROOT = Path(__file__).resolve().parents[2]
TF_DIR = REPO_ROOT / "terraform"
PURE_FILES = ("variables.tf", "topology.tf", "data_model.tf")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
OPTIONS = hcl2.SerializationOptions(strip_string_quotes=True, explicit_blocks=False, with_comments=False)


def parse(path: Path) -> dict[str, Any]:
    with path.open() as f:
        return hcl2.load(f, serialization_options=OPTIONS)


@dataclass
class Config:
    files: dict[str, dict[str, Any]] = field(default_factory=dict)
    resources: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    data: dict[tuple[str, str], dict[str, Any]] = field(default_factory=dict)
    locals: dict[str, Any] = field(default_factory=dict)
    variables: dict[str, dict[str, Any]] = field(default_factory=dict)
    outputs: dict[str, dict[str, Any]] = field(default_factory=dict)
    terraform: list[dict[str, Any]] = field(default_factory=list)

    def resource(self, rtype: str, name: str) -> dict[str, Any]:
        assert (rtype, name) in self.resources, f"terraform/ declares no resource {rtype}.{name}"
        return self.resources[(rtype, name)]

    def of_type(self, rtype: str) -> dict[str, dict[str, Any]]:
        return {name: body for (t, name), body in self.resources.items() if t == rtype}

    def dump(self) -> str:
        """Everything but comments, as one JSON text (for "appears nowhere" checks)."""
        return json.dumps(self.files, sort_keys=True)


def _blocks(doc: Mapping[str, Any], key: str) -> list[dict[str, Any]]:
    value = doc.get(key, [])
    return value if isinstance(value, list) else [value]


def load(directory: Path = TF_DIR) -> Config:
    cfg = Config()
    for path in sorted(directory.glob("*.tf")):
        doc = parse(path)
        cfg.files[path.name] = doc
        for kind, target in (("resource", cfg.resources), ("data", cfg.data)):
            for block in _blocks(doc, kind):
                for rtype, named in block.items():
                    for name, body in named.items():
                        assert (rtype, name) not in target, f"{kind} {rtype}.{name} declared twice"
                        target[(rtype, name)] = body
        for block in _blocks(doc, "locals"):
            for name, value in block.items():
                assert name not in cfg.locals, f"local.{name} declared twice"
                cfg.locals[name] = value
        for block in _blocks(doc, "variable"):
            cfg.variables.update(block)
        for block in _blocks(doc, "output"):
            cfg.outputs.update(block)
        cfg.terraform += _blocks(doc, "terraform")
    return cfg


def block(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The single nested block ``name`` of a resource body."""
    value = body.get(name)
    assert value is not None, f"missing block {name!r}"
    blocks = value if isinstance(value, list) else [value]
    assert len(blocks) == 1, f"expected one {name!r} block, got {len(blocks)}"
    return blocks[0]


def dynamic(body: Mapping[str, Any], name: str) -> dict[str, Any]:
    """The ``dynamic "<name>"`` block of a resource body (its for_each and content)."""
    for d in body.get("dynamic", []):
        if name in d:
            return d[name]
    raise AssertionError(f"missing dynamic {name!r} block")


def terraform_binary() -> str | None:
    return shutil.which("terraform") or (
        "/usr/local/bin/terraform" if os.access("/usr/local/bin/terraform", os.X_OK) else None)


def evaluate(expressions: Mapping[str, str], variables: Mapping[str, Any] | None = None,
             terraform: str | None = None, extra: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Evaluate Terraform expressions over PURE_FILES with ``terraform console``.

    ``variables`` are written to a tfvars JSON file; ``project_id`` defaults to
    a placeholder and ``topology_file`` to the repository's declaration (the
    default of the configuration itself, which resolves relative to terraform/).
    ``extra``: more Terraform text by file name (e.g. the ``locals`` block of a file with resources).
    """
    terraform = terraform or terraform_binary()
    assert terraform, "terraform binary not found"
    tfvars = {"project_id": "dcm-test-project",
              "topology_file": str(REPO_ROOT / "infra" / "topology.yaml"),
              **(variables or {})}
    with tempfile.TemporaryDirectory(prefix="tf-eval-") as tmp:
        for name in PURE_FILES:
            shutil.copy(TF_DIR / name, Path(tmp) / name)
        for name, text in (extra or {}).items():
            (Path(tmp) / name).write_text(text)
        (Path(tmp) / "terraform.tfvars.json").write_text(json.dumps(tfvars))
        body = ", ".join(f"{key} = {expr}" for key, expr in expressions.items())
        env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1",
               "TF_CLI_CONFIG_FILE": os.devnull}
        proc = subprocess.run([terraform, "console"], input=f"jsonencode({{{body}}})\n", cwd=tmp,
                              capture_output=True, text=True, timeout=60, env=env)
    # An invalid variable value (a failed validation) is reported, yet the console answers and exits 0.
    stderr = ANSI.sub("", proc.stderr)
    if proc.returncode != 0 or "Error: " in stderr:
        raise AssertionError(f"terraform console failed:\n{stderr}\n{proc.stdout}")
    # The console prints an HCL string literal: JSON escapes plus $${ and %%{.
    text = proc.stdout.strip().replace("$${", "${").replace("%%{", "%{")
    return json.loads(json.loads(text))
