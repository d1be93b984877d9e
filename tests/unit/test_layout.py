"""The layout rule, checked on the code: runtime/, contracts/ and state/ beneath, one package per
function, and use-case packages that never import each other; in infra/, arrows that go one way
(the CLI may run the demo, both use the local stack, which uses neither) and no loop."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / "shared"
FUNCTIONS = sorted(p.name for p in (REPO / "functions").iterdir() if (p / "main.py").is_file())
BENEATH = ("runtime", "contracts", "state")
IO_MODULES = ("google.cloud", "google.api_core", "requests", "flask", "functions_framework", "socket", "urllib.request")


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module in ("shared", "infra"):
                found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def package_of(module: str) -> str | None:
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "shared" else None


def test_one_package_per_function_and_nothing_loose():
    packages = sorted(p.name for p in SHARED.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert packages == sorted(FUNCTIONS + list(BENEATH))
    assert [p.name for p in SHARED.glob("*.py")] == ["__init__.py"]
    doc = yaml.safe_load((REPO / "infra" / "topology.yaml").read_text())
    workers = [doc["nats"]["worker"]] if doc.get("nats") else []  # long-running, not pushed: not in functions:
    assert sorted([*doc["functions"], *workers]) == FUNCTIONS


def test_the_nats_ingress_is_a_worker_run_as_a_module():
    """functions/nats_ingress/main.py is run as `python -m functions.nats_ingress.main` (no functions-framework)."""
    source = (REPO / "functions" / "nats_ingress" / "main.py").read_text()
    assert 'if __name__ == "__main__":' in source and "functions_framework" not in source


@pytest.mark.parametrize("package", FUNCTIONS)
def test_use_case_packages_import_only_runtime_contracts_and_themselves(package):
    for path in (SHARED / package).rglob("*.py"):
        for module in imports(path):
            target = package_of(module)
            assert target in (None, package, *BENEATH), f"{path.relative_to(REPO)} imports {module}"


def test_runtime_and_contracts_import_no_use_case():
    for below in BENEATH:
        for path in (SHARED / below).rglob("*.py"):
            for module in imports(path):
                assert package_of(module) in (None, *BENEATH), f"{path.relative_to(REPO)} imports {module}"


def test_state_imports_only_contracts_and_itself():
    """The stored-state model and its rules: use cases import it; it builds on the contracts alone."""
    for path in (SHARED / "state").rglob("*.py"):
        for module in imports(path):
            assert package_of(module) in (None, "contracts", "state"), f"{path.relative_to(REPO)} imports {module}"


def test_contracts_do_no_io():
    for path in (SHARED / "contracts").rglob("*.py"):
        for module in imports(path):
            assert package_of(module) != "runtime", f"{path.relative_to(REPO)} imports {module}"
            assert not module.startswith(IO_MODULES), f"{path.relative_to(REPO)} imports {module}"


@pytest.mark.parametrize("name", FUNCTIONS)
def test_entry_points_are_thin(name):
    source = (REPO / "functions" / name / "main.py").read_text()
    assert {package_of(m) for m in imports(REPO / "functions" / name / "main.py")} - {None} == {name, "runtime"}
    assert len([line for line in source.splitlines() if line.strip() and not line.startswith("#")]) <= 10


INFRA = REPO / "infra"


def infra_room(module: str) -> str | None:
    """The folder (or top-level module) of infra/ that `module` is in: cli, demo, local, console, ..."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 and parts[0] == "infra" else None


def infra_arrows() -> dict[str, set[str]]:
    """Each infra/ room and the other rooms it imports."""
    arrows: dict[str, set[str]] = {}
    for path in INFRA.rglob("*.py"):
        rel = path.relative_to(INFRA)
        if rel.parts == ("__init__.py",):
            continue
        room = rel.parts[0].removesuffix(".py")
        targets = {infra_room(m) for m in imports(path)} - {None, room}
        arrows.setdefault(room, set()).update(targets)
    return arrows


def test_infra_rooms_import_each_other_in_no_loop():
    arrows = infra_arrows()
    done: set[str] = set()

    def visit(room: str, path: tuple[str, ...]) -> None:
        assert room not in path, "import loop in infra/: " + " -> ".join((*path, room))
        if room not in done:
            for target in sorted(arrows.get(room, ())):
                visit(target, (*path, room))
            done.add(room)

    for room in sorted(arrows):
        visit(room, ())


def test_the_cli_may_run_the_demo_never_the_reverse():
    arrows = infra_arrows()
    assert "demo" in arrows["cli"]  # dcm-status demo
    assert "cli" not in arrows["demo"], "infra/demo imports infra/cli (shared output lives in infra/console.py)"


def test_the_local_stack_imports_neither_the_cli_nor_the_demo():
    arrows = infra_arrows()
    assert "local" in arrows["cli"] and "local" in arrows["demo"]
    # nats_accounts: the NATS server configuration generator, which production's docs use too
    assert arrows["local"] <= {"topology", "nats_accounts"}, f"infra/local imports {sorted(arrows['local'])}"


def test_reference_providers_are_on_the_kit_alone():
    for path in (INFRA / "providers").rglob("*.py"):
        for module in imports(path):
            assert infra_room(module) is None and package_of(module) is None and module != "shared", \
                f"{path.relative_to(REPO)} imports {module}"
