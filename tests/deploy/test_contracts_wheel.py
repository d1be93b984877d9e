"""The wire contracts' own distribution (shared/contracts/pyproject.toml, dcm-status-contracts) builds
a wheel that installs dcm_status_contracts with the repository's JSON Schemas inside as package data
(setup.py's build step), and nothing of the source folder's own (setup.py, pyproject.toml, README.md)."""

from __future__ import annotations

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
SOURCE = REPO / "shared" / "contracts"


@pytest.fixture(scope="module")
def wheel(tmp_path_factory) -> Path:
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps", "--disable-pip-version-check",
                           "-w", str(out), str(SOURCE)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, f"pip wheel failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    (built,) = out.glob("dcm_status_contracts-*.whl")
    return built


def test_the_wheel_holds_the_modules_and_the_schemas_and_nothing_else(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    package = {n for n in names if not n.startswith("dcm_status_contracts-")}
    modules = {f"dcm_status_contracts/{p.name}" for p in SOURCE.glob("*.py") if p.name != "setup.py"}
    schemas = {f"dcm_status_contracts/{p.relative_to(REPO).as_posix()}" for p in (REPO / "schemas").rglob("*.json")
               if not {"samples", "upstream"} & set(p.relative_to(REPO).parts)}
    assert "dcm_status_contracts/schemas/envelope/cloudevent-v1.json" in schemas
    assert "dcm_status_contracts/schemas/openapi/status-api-v1.json" in schemas  # the api serves it
    assert package == modules | schemas | {"dcm_status_contracts/py.typed"}
    assert not [n for n in package if "/upstream/" in n]  # vendored upstream documents are the tests' only
    assert not {n for n in names if n.endswith(("setup.py", "pyproject.toml", "README.md"))}


def test_no_build_tree_is_left_in_the_source_folder(wheel):
    assert not (SOURCE / "build").exists() and not (SOURCE / "schemas").exists()


def test_the_installed_wheel_reads_its_schemas_as_package_data(wheel, tmp_path):
    target = tmp_path / "site"
    proc = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps", "--disable-pip-version-check",
                           "--target", str(target), str(wheel)], capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    code = ("import dcm_status_contracts as c; from dcm_status_contracts.schemas import registry, schemas_dir;"
            "print(c.__file__); print(schemas_dir()); print(len(registry().resource_types))")
    env = {k: v for k, v in os.environ.items() if k != "DCM_SCHEMAS_DIR"} | {"PYTHONPATH": str(target)}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr[-3000:]
    module, folder, types = proc.stdout.split()
    assert Path(module).is_relative_to(target), module  # the wheel's, not the checkout's (an editable install)
    assert Path(folder) == target / "dcm_status_contracts" / "schemas"
    assert int(types) > 0
