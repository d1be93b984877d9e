"""The layout rule, checked on the code: the wire contracts (shared/contracts/, their own distribution,
imported as dcm_status_contracts) at the bottom, importing nothing but themselves; runtime/ and state/
beneath the use cases; one package per function, and use-case packages that never import each other; a
feature's package (shared/callbacks/: one feature, whichever functions serve it) between the two, importing
only what is beneath; in infra/, arrows that go one way (the CLI may run the demo, both use the local stack,
which uses neither); no import loop between any two modules of infra/ or shared/; no symbolic link anywhere;
no module outside the tests over 450 lines (but the dashboard's script and terraform/variables.tf), no function
over 50."""

from __future__ import annotations

import ast
import functools
import os
import re
import sys
import tomllib
from pathlib import Path

import pytest
import yaml

REPO = Path(__file__).resolve().parents[2]
SHARED = REPO / "shared"
CONTRACTS = SHARED / "contracts"  # the source of dcm_status_contracts (package-dir: shared/contracts -> it)
FUNCTIONS = sorted(p.name for p in (REPO / "functions").iterdir() if (p / "main.py").is_file())
BENEATH = ("runtime", "contracts", "state")
# A feature several use cases share, in one package of its own: it imports only what is BENEATH (and itself),
# and which use case may import it is said here.
FEATURES = {"callbacks": ("api", "notify", "upsert")}
OURS = ("shared", "infra", "functions", "tests", "benchmarks", "examples", "dcm_status_sdk", "dcm_status_contracts")
IO_MODULES = ("google.cloud", "google.api_core", "requests", "flask", "functions_framework", "socket", "urllib.request")


@functools.cache
def parsed(path: Path) -> ast.Module:
    """A module's syntax tree, parsed once per run (many tests walk the same modules; none changes a tree)."""
    return ast.parse(path.read_text())


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            if node.module in ("shared", "infra"):
                found.update(f"{node.module}.{a.name}" for a in node.names)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def package_of(module: str) -> str | None:
    """The room of shared/ a module is in (the contracts: by their one name, dcm_status_contracts)."""
    parts = module.split(".")
    if parts[0] == "dcm_status_contracts":
        return "contracts"
    return parts[1] if len(parts) > 1 and parts[0] == "shared" else None


def python_files(*roots: Path) -> list[Path]:
    return [p for root in roots for p in root.rglob("*.py") if ".venv" not in p.parts and "build" not in p.parts]


def test_one_package_per_function_and_nothing_loose():
    packages = sorted(p.name for p in SHARED.iterdir() if p.is_dir() and (p / "__init__.py").is_file())
    assert packages == sorted(FUNCTIONS + list(BENEATH) + list(FEATURES))
    assert [p.name for p in SHARED.glob("*.py")] == ["__init__.py"]
    doc = yaml.safe_load((REPO / "infra" / "topology.yaml").read_text())
    workers = [doc["nats"]["worker"]] if doc.get("nats") else []  # long-running, not pushed: not in functions:
    assert sorted([*doc["functions"], *workers]) == FUNCTIONS


def test_the_nats_ingress_is_a_worker_run_as_a_module():
    """functions/nats_ingress/main.py is run as `python -m functions.nats_ingress.main` (no functions-framework)."""
    source = (REPO / "functions" / "nats_ingress" / "main.py").read_text()
    assert 'if __name__ == "__main__":' in source and "functions_framework" not in source


@pytest.mark.parametrize("package", FUNCTIONS)
def test_use_case_packages_import_only_runtime_contracts_their_features_and_themselves(package):
    features = [f for f, users in FEATURES.items() if package in users]
    for path in (SHARED / package).rglob("*.py"):
        for module in imports(path):
            target = package_of(module)
            assert target in (None, package, *BENEATH, *features), f"{path.relative_to(REPO)} imports {module}"


@pytest.mark.parametrize("feature", sorted(FEATURES))
def test_feature_packages_import_only_what_is_beneath_them(feature):
    for path in (SHARED / feature).rglob("*.py"):
        for module in imports(path):
            assert package_of(module) in (None, feature, *BENEATH), f"{path.relative_to(REPO)} imports {module}"


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
    """Reading their own schemas (importlib.resources, or the checkout's schemas/) is all (schemas.py)."""
    for path in CONTRACTS.glob("*.py"):
        for module in imports(path):
            assert not module.startswith(IO_MODULES), f"{path.relative_to(REPO)} imports {module}"


def test_upserts_decision_does_no_io():
    """shared/upsert/decide.py and decision.py: the stored state and the update in, what to write and announce
    out, as data; shared/upsert/store.py reads and writes Firestore (the clock included)."""
    for name in ("decide.py", "decision.py"):
        path = SHARED / "upsert" / name
        for module in imports(path):
            assert not module.startswith(IO_MODULES), f"{path.relative_to(REPO)} imports {module}"
            assert package_of(module) in (None, "contracts", "state", "upsert"), f"{path.relative_to(REPO)} imports {module}"
        assert "timeutil.now" not in path.read_text(), f"{path.relative_to(REPO)} reads the clock"


def declared_dependencies() -> set[str]:
    with (CONTRACTS / "pyproject.toml").open("rb") as f:
        project = tomllib.load(f)["project"]
    requirements = [*project["dependencies"], *(d for extra in project.get("optional-dependencies", {}).values()
                                                for d in extra)]
    return {re.split(r"[\s\[<>=!~;]", r, maxsplit=1)[0].lower().replace("-", "_") for r in requirements}


# Import names of the declared dependencies that differ from the distribution's name (jsonschema brings referencing).
IMPORT_NAMES = {"referencing": "jsonschema", "opentelemetry": "opentelemetry_api"}


def absolute_imports(path: Path) -> set[str]:
    """What ``path`` imports by absolute name (``from .errors import ...`` is the package itself)."""
    found = set()
    for node in ast.walk(parsed(path)):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module)
        elif isinstance(node, ast.Import):
            found.update(a.name for a in node.names)
    return found


def test_contracts_import_only_themselves_the_standard_library_and_their_declared_dependencies():
    allowed = declared_dependencies()
    for path in CONTRACTS.glob("*.py"):
        if path.name == "setup.py":  # the build step, not a module of the package
            continue
        for module in absolute_imports(path):
            top = module.split(".")[0]
            if top == "dcm_status_contracts" or top in sys.stdlib_module_names:
                continue
            assert top not in OURS, f"{path.relative_to(REPO)} imports {module}: the contracts import nothing of ours"
            assert IMPORT_NAMES.get(top, top) in allowed, \
                f"{path.relative_to(REPO)} imports {module}, not declared in shared/contracts/pyproject.toml"


def test_contracts_import_themselves_relatively_or_by_their_one_name():
    for path in CONTRACTS.glob("*.py"):
        source = path.read_text()
        assert not re.search(r"^\s*(from|import) shared\b", source, re.M), path.relative_to(REPO)


OTHER_NAME = re.compile(r"^\s*(from|import)\s+(shared|dcm_status_sdk)\.contracts\b|^\s*from\s+\.contracts\b"
                        r"|^\s*from\s+(shared|dcm_status_sdk)\s+import\s+(\(\s*)?([\w\s,]*,\s*)?contracts\b", re.M)


def test_nothing_imports_the_contracts_by_another_name():
    roots = [REPO / d for d in ("shared", "infra", "functions", "sdk", "tests", "benchmarks", "examples")]
    for path in python_files(*roots):
        found = OTHER_NAME.search(path.read_text())
        assert not found, f"{path.relative_to(REPO)}: {found.group(0).strip()!r}: import dcm_status_contracts"


def test_no_symbolic_links_in_the_tree():
    links = []
    for folder, dirs, files in os.walk(REPO):
        dirs[:] = [d for d in dirs if not d.startswith(".") and d not in ("build", "__pycache__")]
        links += [Path(folder, n).relative_to(REPO) for n in dirs + files if Path(folder, n).is_symlink()]
    assert not links, f"symbolic links: {links} (one copy of each file; the contracts are a distribution)"


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


def first_loop(arrows: dict[str, set[str]]) -> tuple[str, ...]:
    """The first import loop of ``arrows`` (A -> ... -> A), depth first in name order; () when there is none."""
    done: set[str] = set()

    def visit(node: str, path: tuple[str, ...]) -> tuple[str, ...]:
        if node in path:
            return (*path[path.index(node):], node)
        if node in done:
            return ()
        loop = next((found for t in sorted(arrows.get(node, ())) if (found := visit(t, (*path, node)))), ())
        done.add(node)
        return loop

    return next((found for node in sorted(arrows) if (found := visit(node, ()))), ())


def test_infra_rooms_import_each_other_in_no_loop():
    loop = first_loop(infra_arrows())
    assert not loop, "import loop in infra/: " + " -> ".join(loop)


def module_of(path: Path) -> str:
    """The name a module of infra/ or shared/ is imported by (the contracts: dcm_status_contracts.X)."""
    rel = path.relative_to(REPO).with_suffix("")
    parts = list(rel.parts[:-1] if rel.name == "__init__" else rel.parts)
    if parts[:2] == ["shared", "contracts"]:
        parts = ["dcm_status_contracts", *parts[2:]]
    return ".".join(parts)


LAZY_IMPORT = re.compile(r"([A-Za-z_][\w.]*):[A-Za-z_]\w*")  # "module:attribute", imported by name when used


def module_arrows() -> dict[str, set[str]]:
    """Each module of infra/ and shared/ and the modules of theirs it imports, wherever the import stands
    (a function's body, ``if TYPE_CHECKING:``, a lazy "module:attribute" name): ``from pkg import mod``
    names the module, not the package."""
    paths = [p for p in python_files(INFRA, SHARED) if p.name != "setup.py"]
    known = {module_of(p) for p in paths}
    arrows: dict[str, set[str]] = {}
    for path in paths:
        here = module_of(path)
        package = here if path.name == "__init__.py" else here.rpartition(".")[0]
        targets: set[str] = set()
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Import):
                targets.update(a.name for a in node.names)
            elif isinstance(node, ast.ImportFrom):
                base = ".".join([*package.split(".")[:len(package.split(".")) - node.level + 1], node.module or ""]
                                ).strip(".") if node.level else node.module or ""
                named = {f"{base}.{a.name}" for a in node.names} & known
                targets.update(named or {base})
            elif isinstance(node, ast.Constant) and isinstance(node.value, str) and (
                    lazy := LAZY_IMPORT.fullmatch(node.value)):
                targets.add(lazy.group(1))  # imported when used: infra/cli/errors.py Group(lazy=...)
        arrows[here] = {t for t in targets if t in known} - {here}
    return arrows


def test_no_two_modules_of_infra_or_shared_import_each_other_in_a_loop():
    """Any loop, however long, between any two modules (issue 39: the room-level test above missed
    infra/local/natsserver.py <-> infra/local/stack.py)."""
    arrows = module_arrows()
    assert {"infra.local.stack", "infra.local.natsserver", "dcm_status_contracts.pubsub_binding"} <= set(arrows)
    assert "infra.cli.billing" in arrows["infra.cli.main"]  # a lazy subcommand counts as an import
    loop = first_loop(arrows)
    assert not loop, "import loop: " + " -> ".join(loop)


def test_a_loop_between_two_modules_is_found():
    assert first_loop({"a": {"b"}, "b": {"c"}, "c": {"b"}}) == ("b", "c", "b")
    assert first_loop({"a": {"b"}, "b": set()}) == ()


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
    """The kit (dcm_status_sdk) and the contracts it installs (dcm_status_contracts), nothing of shared/."""
    for path in (INFRA / "providers").rglob("*.py"):
        for module in imports(path):
            assert infra_room(module) is None and module.split(".")[0] != "shared", \
                f"{path.relative_to(REPO)} imports {module}"


def _path_literals(path: Path) -> set[str]:
    """The string literals of a module that are no docstring."""
    tree = parsed(path)
    docs = {id(n.body[0].value) for n in ast.walk(tree) if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef))
            and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
    return {n.value for n in ast.walk(tree) if isinstance(n, ast.Constant) and isinstance(n.value, str)
            and id(n) not in docs}


def test_vendored_upstream_documents_are_read_by_tests_only():
    """schemas/upstream/ (other projects' API documents, schemas/upstream/README.md) is left out of the
    contracts wheel (shared/contracts/setup.py): no code that ships names it."""
    for path in python_files(SHARED, REPO / "functions", REPO / "infra", REPO / "sdk"):
        if path == CONTRACTS / "setup.py":
            continue
        named = {s for s in _path_literals(path) if s == "upstream" or "schemas/upstream" in s}
        assert not named, f"{path.relative_to(REPO)} names the vendored upstream documents: {named}"


def test_every_message_a_function_publishes_goes_through_the_one_publish_that_carries_the_trace():
    """shared/runtime/publishing.py ``publish`` puts the current span's trace context on every message
    (docs/tracing.md); a client's own ``.publish(...)`` elsewhere would break the event's trace. The NATS
    ingress publishes asynchronously and injects the context itself (shared/nats_ingress/forward.py); the
    functions' client (shared/runtime/clients.py ``SyncPublisher``) is what ``publish`` calls."""
    allowed = {SHARED / "runtime" / "publishing.py", SHARED / "nats_ingress" / "forward.py",
               SHARED / "runtime" / "clients.py"}
    for path in python_files(SHARED):
        if path in allowed:
            continue
        for node in ast.walk(parsed(path)):
            if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
                assert node.func.attr != "publish", f"{path.relative_to(REPO)}:{node.lineno} publishes past " \
                                                    "shared/runtime/publishing.publish (no trace context)"
    forward = (SHARED / "nats_ingress" / "forward.py").read_text()
    assert "trace_context.inject(attributes)" in forward


def test_the_export_schema_generator_reads_the_declaration_only():
    """infra/bigquery_schema.py writes terraform/bigquery/ from JSON schemas: the topology, nothing running."""
    assert infra_arrows()["bigquery_schema"] <= {"topology"}
    assert not [m for m in imports(INFRA / "bigquery_schema.py") if m.split(".")[0] == "shared"]


def test_the_history_backfill_is_an_entry_point_over_the_state_model_alone():
    """infra/backfill_history.py: issue 32's one-off job (docs/api.md, "History"); its logic is shared/state's,
    its command line infra/backfill_job.py's."""
    path = INFRA / "backfill_history.py"
    assert infra_arrows()["backfill_history"] == {"backfill_job"}
    assert {package_of(m) for m in imports(path)} - {None} == {"state"}


def test_the_shard_backfill_is_an_entry_point_over_the_state_model_alone():
    """infra/backfill_shards.py: the deploy's one-off job (docs/scale.md); its logic is shared/state's, its
    command line infra/backfill_job.py's."""
    path = INFRA / "backfill_shards.py"
    assert infra_arrows()["backfill_shards"] == {"backfill_job"}
    assert {package_of(m) for m in imports(path)} - {None} == {"state"}


def test_the_backfills_command_line_imports_nothing_of_ours():
    """infra/backfill_job.py: argparse, the bounds and the one-line failures both backfills share (issue 39:
    written twice before); the standard library and the Firestore client alone."""
    assert infra_arrows()["backfill_job"] == set()
    assert not [m for m in imports(INFRA / "backfill_job.py") if m.split(".")[0] in OURS]


# Issue 39's limits: a module a newcomer reads in one sitting, a function on one screen. The dashboard's
# JavaScript (one page's script) and terraform/variables.tf (one declaration per deployer setting) are the
# two modules allowed past it.
MAX_MODULE_LINES = 450
MAX_FUNCTION_LINES = 50
CODE_SUFFIXES = (".py", ".js", ".tf", ".sh", ".css", ".html")
LONG_MODULES_ALLOWED = {"shared/api/static/app.js", "terraform/variables.tf"}
SKIPPED_FOLDERS = {"build", "node_modules", "__pycache__", "tests"}


def code_files() -> list[Path]:
    """Every module of the tree but the tests' (and what is built or installed: no hidden folder, where the
    virtualenvs are, `.venv` and lint's `.venv-checkov`, and the local stack's state)."""
    found = []
    for folder, subfolders, files in os.walk(REPO):
        subfolders[:] = [d for d in subfolders
                         if d not in SKIPPED_FOLDERS and not d.startswith(".") and not d.endswith(".egg-info")]
        found += [Path(folder) / f for f in files if f.endswith(CODE_SUFFIXES)]
    return found


def test_no_module_but_the_dashboards_script_and_terraforms_variables_is_over_450_lines():
    files = code_files()
    assert {REPO / "shared" / "runtime" / "settings.py", REPO / "shared" / "api" / "static" / "app.js"} <= set(files)
    long = {str(p.relative_to(REPO)): n for p in files
            if (n := len(p.read_text(errors="replace").splitlines())) > MAX_MODULE_LINES}
    assert set(long) <= LONG_MODULES_ALLOWED, f"modules over {MAX_MODULE_LINES} lines: {long}"


def functions_over(limit: int, source: str, where: str) -> list[str]:
    """The functions of ``source`` (methods and nested ones too) longer than ``limit`` lines, decorators not
    counted."""
    return [f"{where}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
            for node in ast.walk(ast.parse(source))
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.end_lineno - node.lineno >= limit]


def test_no_function_outside_the_tests_is_over_50_lines():
    long = [f for p in code_files() if p.suffix == ".py"
            for f in functions_over(MAX_FUNCTION_LINES, p.read_text(), str(p.relative_to(REPO)))]
    assert not long, f"functions over {MAX_FUNCTION_LINES} lines: " + "; ".join(long)


def test_a_function_over_the_limit_is_found_wherever_it_stands():
    def lines(n: int, indent: int) -> str:
        return "\n".join(f"{' ' * indent}x = {i}" for i in range(n))

    source = (f"def fits():\n{lines(49, 4)}\n\n\ndef over():\n{lines(50, 4)}\n\n\n"
              f"class C:\n    async def method(self):\n        def nested():\n{lines(50, 12)}\n")
    assert sorted(f.split()[1] for f in functions_over(50, source, "m.py")) == ["method", "nested", "over"]
