"""Read the Terraform configuration two ways, both offline.

- ``load()`` parses every ``terraform/*.tf`` with python-hcl2 into resources,
  locals, variables, outputs: the structure of the configuration.
- ``evaluate()`` runs the real ``terraform console`` over the files that use
  only variables and functions (``PURE_FILES``: the expansion of
  infra/topology.yaml and the Firestore data model). It needs no provider and
  no ``terraform init``, and returns the very values Terraform would use. Each answer is kept under
  build/test-cache/ by the hash of everything the console reads (the terraform binary, the files it is
  given, the files the variables name, the expressions): asked again with the same inputs, the next run
  reads it there instead of starting terraform (about 1 s each, some 60 per run); any edit misses.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import hcl2

REPO_ROOT = Path(__file__).resolve().parents[2]
TF_DIR = REPO_ROOT / "terraform"
PURE_FILES = ("variables.tf", "topology.tf", "data_model.tf")
ANSI = re.compile(r"\x1b\[[0-9;]*m")
CACHE = REPO_ROOT / "build" / "test-cache" / "terraform-console"
CACHE_DAYS = 7  # an answer nobody read for this long is dropped (one asked with a file of a test's tmp_path)
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
    files = {**{name: (TF_DIR / name).read_text() for name in PURE_FILES}, **(extra or {}),
             "terraform.tfvars.json": json.dumps(tfvars)}
    body = ", ".join(f"{key} = {expr}" for key, expr in expressions.items())
    returncode, stdout, stderr = console(terraform, files, f"jsonencode({{{body}}})\n", named_files(tfvars))
    # An invalid variable value (a failed validation) is reported, yet the console answers and exits 0.
    stderr = ANSI.sub("", stderr)
    if returncode != 0 or "Error: " in stderr:
        raise AssertionError(f"terraform console failed:\n{stderr}\n{stdout}")
    # The console prints an HCL string literal: JSON escapes plus $${ and %%{.
    text = stdout.strip().replace("$${", "${").replace("%%{", "%{")
    return json.loads(json.loads(text))


def named_files(tfvars: Mapping[str, Any]) -> dict[str, str]:
    """The text of each file a variable names (``topology_file``): the console reads them too."""
    return {value: Path(value).read_text() for value in tfvars.values()
            if isinstance(value, str) and value.startswith("/") and Path(value).is_file()}


def console(terraform: str, files: Mapping[str, str], text: str, read: Mapping[str, str]) -> tuple[int, str, str]:
    """``terraform console`` in a directory of ``files``, fed ``text``: (exit status, stdout, stderr), from
    the cache when the same inputs were evaluated before (``read``: the other files it reads, by path)."""
    binary = Path(terraform).resolve()
    stat = binary.stat()
    key = hashlib.sha256(json.dumps([str(binary), stat.st_size, stat.st_mtime_ns, files, read, text],
                                    sort_keys=True).encode()).hexdigest()
    kept = CACHE / f"{key}.json"
    if kept.is_file():
        os.utime(kept)
        return tuple(json.loads(kept.read_text()))  # type: ignore[return-value]
    with tempfile.TemporaryDirectory(prefix="tf-eval-") as tmp:
        for name, content in files.items():
            (Path(tmp) / name).write_text(content)
        env = {**os.environ, "TF_IN_AUTOMATION": "1", "CHECKPOINT_DISABLE": "1",
               "TF_CLI_CONFIG_FILE": os.devnull}
        proc = subprocess.run([terraform, "console"], input=text, cwd=tmp,
                              capture_output=True, text=True, timeout=60, env=env)
    answer = (proc.returncode, proc.stdout, proc.stderr)
    _keep(kept, answer)
    return answer


def _keep(path: Path, answer: tuple[int, str, str]) -> None:
    """Store one answer (written whole, then renamed: two test workers may store the same one) and drop
    those unread for CACHE_DAYS."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(f".{os.getpid()}.tmp")
    partial.write_text(json.dumps(answer))
    os.replace(partial, path)
    stale = time.time() - CACHE_DAYS * 86400
    for old in path.parent.glob("*.json"):
        if old.stat().st_mtime < stale:
            old.unlink(missing_ok=True)
