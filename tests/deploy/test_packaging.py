"""The deploy zips (infra/package.py): layout, determinism, and proof that they start.

The ``deploy``-marked tests install the zips' requirements.txt in ONE clean
virtualenv (all functions share the same requirements, which is asserted), then
unzip each function alone and import its main.py there, with nothing from the
repository on the path: what Cloud Functions builds is what starts.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tomllib
import venv
import zipfile
from pathlib import Path

import pytest

from infra import package
from infra.topology import read as read_topology

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = list(read_topology()["functions"])


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> dict[str, package.Package]:
    out = tmp_path_factory.mktemp("build")
    return {p.function: p for p in package.build_all(out)}


def names(zip_path: Path) -> list[str]:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.namelist()


def read(zip_path: Path, name: str) -> bytes:
    with zipfile.ZipFile(zip_path) as zf:
        return zf.read(name)


# ---- layout --------------------------------------------------------------------


def test_one_zip_per_declared_function(built):
    assert sorted(built) == sorted(FUNCTIONS)
    for name, p in built.items():
        assert p.path.name == f"{name}.zip" and p.path.is_file()


@pytest.mark.parametrize("name", FUNCTIONS)
def test_zip_layout(built, name):
    zip_path = built[name].path
    entries = names(zip_path)
    assert entries == sorted(entries), "entries are sorted"
    assert read(zip_path, "main.py") == (REPO_ROOT / "functions" / name / "main.py").read_bytes()
    own = {"runtime", "contracts", name}  # a function's zip holds only what it runs
    for path in (REPO_ROOT / "shared").rglob("*.py"):
        rel = path.relative_to(REPO_ROOT)
        package_name = rel.parts[1] if len(rel.parts) > 2 else None
        assert (rel.as_posix() in entries) == (package_name is None or package_name in own), rel
    for path in (REPO_ROOT / "schemas").rglob("*.json"):
        rel = path.relative_to(REPO_ROOT).as_posix()
        assert (rel in entries) == ("samples" not in path.relative_to(REPO_ROOT).parts), rel
    assert "requirements.txt" in entries
    assert not [e for e in entries if "__pycache__" in e or e.endswith(".pyc")]
    assert not [e for e in entries if e.startswith(("tests/", "infra/", "functions/", "terraform/"))]


def test_requirements_are_the_project_dependencies(built):
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    for p in built.values():
        lines = read(p.path, "requirements.txt").decode().splitlines()
        assert [line for line in lines if line and not line.startswith("#")] == deps


def test_zips_are_deterministic(built, tmp_path):
    again = {p.function: p for p in package.build_all(tmp_path)}
    for name, p in built.items():
        assert again[name].sha256 == p.sha256
        assert again[name].path.read_bytes() == p.path.read_bytes()
        assert hashlib.sha256(p.path.read_bytes()).hexdigest() == p.sha256
        with zipfile.ZipFile(p.path) as zf:
            assert {i.date_time for i in zf.infolist()} == {package.FIXED_DATE_TIME}
    manifest = json.loads((tmp_path / package.MANIFEST).read_text())
    assert {n: m["sha256"] for n, m in manifest.items()} == {n: p.sha256 for n, p in built.items()}


def test_hash_changes_only_with_content(built, tmp_path):
    root = tmp_path / "repo"
    for part in ("functions", "shared", "schemas"):
        shutil.copytree(REPO_ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "infra").mkdir()
    shutil.copy(REPO_ROOT / "infra" / "topology.yaml", root / "infra" / "topology.yaml")
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    for path in root.rglob("*"):  # other mtimes and modes change nothing
        os.utime(path, (0, 0))
    same = package.build("ingest", tmp_path / "same", root)
    assert same.sha256 == built["ingest"].sha256
    (root / "shared" / "__init__.py").write_text((root / "shared" / "__init__.py").read_text() + "\n# changed\n")
    changed = package.build("ingest", tmp_path / "changed", root)
    assert changed.sha256 != built["ingest"].sha256


def test_cli_prints_paths_and_hashes(tmp_path, capsys):
    assert package.main(["--out", str(tmp_path), "--function", "ingest"]) == 0
    out = capsys.readouterr().out
    sha = hashlib.sha256((tmp_path / "ingest.zip").read_bytes()).hexdigest()
    assert f"{tmp_path / 'ingest.zip'}  sha256:{sha}" in out


# ---- what we deploy starts ---------------------------------------------------------


@pytest.fixture(scope="module")
def clean_venv(built, tmp_path_factory) -> Path:
    """One virtualenv holding only the zips' requirements.txt (identical for all functions)."""
    requirements = {read(p.path, "requirements.txt") for p in built.values()}
    assert len(requirements) == 1, "all functions share one requirements.txt, so one venv serves them all"
    root = tmp_path_factory.mktemp("venv")
    (root / "requirements.txt").write_bytes(requirements.pop())
    env_dir = root / "venv"
    venv.EnvBuilder(with_pip=True, clear=True).create(env_dir)
    python = env_dir / "bin" / "python"
    proc = subprocess.run([str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check",
                           "-r", str(root / "requirements.txt")], capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"pip install failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return python


SMOKE = """
import os, sys
import main
import shared
here = os.getcwd()
assert main.__file__.startswith(here) and shared.__file__.startswith(here), (main.__file__, shared.__file__)
assert callable(getattr(main, NAME)), NAME
from functions_framework import create_app
app = create_app(NAME, "main.py")  # what the Cloud Functions runtime does
body = {"message": {"data": "e30=", "attributes": {}, "messageId": "1",
                    "publishTime": "2024-01-01T00:00:00Z"},
        "subscription": "projects/test/subscriptions/s"}
resp = app.test_client().post("/projects/test/topics/t", json=body)
assert resp.status_code == 401, resp.status_code  # production mode: a push without token is refused
print("started", NAME)
"""


@pytest.mark.deploy
@pytest.mark.timeout(1800)
@pytest.mark.parametrize("name", FUNCTIONS)
def test_deploy_zip_starts_in_a_clean_virtualenv(built, clean_venv, tmp_path, name):
    with zipfile.ZipFile(built[name].path) as zf:
        zf.extractall(tmp_path)
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(tmp_path), "DCM_PROJECT": "test",
           "LANG": "C.UTF-8"}
    proc = subprocess.run([str(clean_venv), "-E", "-s", "-c", f"NAME = {name!r}\n" + SMOKE], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{name}: import main failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert f"started {name}" in proc.stdout
    assert Path(sys.executable).resolve() != clean_venv.resolve()
