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
import zipfile
from pathlib import Path

import pytest

from infra import package
from infra import topology as topo
from infra.topology import read as read_topology
from tests import clean_venv as clean_venv_module

REPO_ROOT = Path(__file__).resolve().parents[2]
FUNCTIONS = list(read_topology()["functions"])
HTTP_FUNCTIONS = topo.load().http_functions  # called over HTTP (the status API), never pushed to
# What the api serves besides JSON: the dashboard (shared/api/static/, its page at /
# and its assets) and the OpenAPI document (GET /v1/openapi.json), read from the deployed tree.
API_FILES = ("shared/api/static/index.html", "shared/api/static/app.js", "shared/api/static/app.css",
             "dcm_status_contracts/schemas/openapi/status-api-v1.json")


def repo_path(arcname: str) -> Path:
    """Where a zip entry comes from in the repository (the contracts: shared/contracts/, their schemas: schemas/)."""
    contracts, _, rest = arcname.partition(f"{package.CONTRACTS}/")
    if contracts or not rest:
        return REPO_ROOT / arcname
    return REPO_ROOT / rest if rest.startswith("schemas/") else REPO_ROOT / "shared" / "contracts" / rest


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
    own = {"runtime", "state", name, *package.features_of(name)}  # a function's zip holds only what it runs
    for path in (REPO_ROOT / "shared").rglob("*.py"):
        rel = path.relative_to(REPO_ROOT)
        package_name = rel.parts[1] if len(rel.parts) > 2 else None
        if package_name != "contracts":
            assert (rel.as_posix() in entries) == (package_name is None or package_name in own), rel
    contracts = REPO_ROOT / "shared" / "contracts"  # carried as its wheel installs it: dcm_status_contracts/
    for path in contracts.glob("*.py"):
        arcname = f"{package.CONTRACTS}/{path.name}"
        assert (arcname in entries) == (path.name != "setup.py"), arcname
        if path.name != "setup.py":
            assert read(zip_path, arcname) == path.read_bytes(), arcname
    for path in (REPO_ROOT / "schemas").rglob("*.json"):  # the schemas with them, as package data, no sample
        rel = path.relative_to(REPO_ROOT)
        arcname = f"{package.CONTRACTS}/{rel.as_posix()}"
        assert (arcname in entries) == ("samples" not in rel.parts), arcname
    assert not [e for e in entries if e.startswith(("schemas/", "shared/contracts/"))]
    assert not [e for e in entries if e.startswith(f"{package.CONTRACTS}/") and ".egg-info" in e]
    assert "requirements.txt" in entries
    assert not [e for e in entries if "__pycache__" in e or e.endswith(".pyc")]
    assert not [e for e in entries if e.startswith(("tests/", "infra/", "functions/", "terraform/"))]


def test_api_zip_carries_the_dashboard_and_the_openapi_document(built):
    assert "api" in FUNCTIONS
    zip_path = built["api"].path
    entries = set(names(zip_path))
    for rel in API_FILES:
        assert rel in entries, f"{rel} missing from api.zip"
        assert read(zip_path, rel) == repo_path(rel).read_bytes(), rel
    static = REPO_ROOT / "shared" / "api" / "static"
    for path in static.rglob("*"):  # and whatever else the dashboard grows
        rel = path.relative_to(static)
        if path.is_file() and not any(part.startswith(".") for part in rel.parts):
            assert f"shared/api/static/{rel.as_posix()}" in entries, rel
    for name, p in built.items():  # the dashboard is the api's alone; the OpenAPI document is the contracts'
        if name != "api":
            assert not [e for e in names(p.path) if e.startswith("shared/api/")], name


def copy_of_repo(root):
    """What packaging reads of the repository, copied to ``root``."""
    for part in ("functions", "shared", "schemas"):
        shutil.copytree(REPO_ROOT / part, root / part, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "infra").mkdir()
    shutil.copy(REPO_ROOT / "infra" / "topology.yaml", root / "infra" / "topology.yaml")
    shutil.copy(REPO_ROOT / "pyproject.toml", root / "pyproject.toml")
    return root


def test_non_python_files_of_the_own_package_are_packaged(tmp_path):
    """Every file of shared/<name>/ goes in its zip, whatever its suffix; caches and dotfiles do not."""
    root = copy_of_repo(tmp_path / "repo")
    static = root / "shared" / "api" / "static"
    shutil.rmtree(static, ignore_errors=True)
    static.mkdir()
    carried = {"index.html": b"<!doctype html>", "app.js": b"'use strict';", "app.css": b"body{}",
               "img/logo.svg": b"<svg/>"}
    for rel, data in carried.items():
        (static / rel).parent.mkdir(parents=True, exist_ok=True)
        (static / rel).write_bytes(data)
    for rel in (".DS_Store", "__pycache__/app.cpython-312.pyc", "app.pyc"):
        (static / rel).parent.mkdir(parents=True, exist_ok=True)
        (static / rel).write_bytes(b"x")
    content = package.entries("api", root)
    for rel, data in carried.items():
        assert content[f"shared/api/static/{rel}"] == data, rel
    assert not [e for e in content if e.startswith("shared/api/static/") and e.removeprefix(
        "shared/api/static/") not in carried], "dotfiles and bytecode are left out"
    assert "dcm_status_contracts/schemas/openapi/status-api-v1.json" in content


def test_requirements_are_the_project_dependencies_but_the_contracts_carried_as_source(built):
    with (REPO_ROOT / "pyproject.toml").open("rb") as f:
        deps = tomllib.load(f)["project"]["dependencies"]
    assert [d for d in deps if d.startswith(package.CONTRACTS_DIST)]
    deps = [d for d in deps if not d.startswith(package.CONTRACTS_DIST)]
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
    root = copy_of_repo(tmp_path / "repo")
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
    python = clean_venv_module.create(root / "venv")
    proc = subprocess.run([*clean_venv_module.installer(python), "--quiet", "-r", str(root / "requirements.txt")],
                          capture_output=True, text=True, timeout=1500)
    assert proc.returncode == 0, f"install failed:\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
    return python


SMOKE = """
import json, os, sys
import main
import shared
import dcm_status_contracts
from dcm_status_contracts.schemas import registry, schemas_dir
here = os.getcwd()
for module in (main, shared, dcm_status_contracts):  # the zip's own, nothing installed
    assert module.__file__.startswith(here), module.__file__
assert str(schemas_dir()) == os.path.join(here, "dcm_status_contracts", "schemas"), schemas_dir()  # package data
assert registry().resource_types, "the schemas compile from the zip"
assert callable(getattr(main, NAME)), NAME
from functions_framework import create_app
app = create_app(NAME, "main.py")  # what the Cloud Functions runtime does
client = app.test_client()
body = {"message": {"data": "e30=", "attributes": {}, "messageId": "1",
                    "publishTime": "2024-01-01T00:00:00Z"},
        "subscription": "projects/test/subscriptions/s"}
resp = client.post("/v1/resources" if HTTP else "/projects/test/topics/t", json=body)
if HTTP:  # the status API: read only, and it serves its dashboard and OpenAPI document from the zip
    assert resp.status_code == 405, resp.status_code
    resp = client.get("/v1/openapi.json")
    assert resp.status_code == 200 and json.loads(resp.data)["openapi"].startswith("3."), resp.status_code
    resp = client.get("/")
    assert resp.status_code == 200 and resp.mimetype == "text/html", (resp.status_code, resp.mimetype)
    # every script and style sheet the page refers to is served (through functions-framework's app)
    import re
    assets = [a for a in re.findall(r'(?:src|href)="([^"#?]+)', resp.get_data(as_text=True))
              if not re.match(r"[a-z]+:|//", a)]
    for asset in assets:
        got = client.get("/" + asset.lstrip("./").lstrip("/"))
        assert got.status_code == 200, (asset, got.status_code)
else:
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
    if name in HTTP_FUNCTIONS:
        # No Google credentials here: a Firestore client that needs none (never connected, as
        # the pages checked read no document).
        env["FIRESTORE_EMULATOR_HOST"] = "127.0.0.1:9"
        env["DCM_API_AUDIENCE"] = f"https://{name}.example"  # what its callers' tokens are for: it checks them
    else:  # what terraform/functions.tf gives a pushed function: without them it refuses to start
        env.update(DCM_PUSH_AUDIENCE=f"https://{name}.example", DCM_PUSH_SERVICE_ACCOUNT="invoker@test.example")
    if name in ("notify", "api"):  # terraform/functions.tf names their keyring; without it they refuse to start
        env["DCM_CALLBACK_KEYS_SECRET"] = "projects/test/secrets/dcm-callback-keys/versions/latest"
    code = f"NAME = {name!r}\nHTTP = {name in HTTP_FUNCTIONS}\n" + SMOKE
    proc = subprocess.run([str(clean_venv), "-E", "-s", "-c", code], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{name}: import main failed:\n{proc.stdout}\n{proc.stderr[-4000:]}"
    assert f"started {name}" in proc.stdout
    assert clean_venv.parent.parent.resolve() != Path(sys.prefix).resolve()  # its own virtualenv, not the tests'
