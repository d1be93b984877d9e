"""The one build step pyproject.toml cannot say: a built wheel carries the repository's JSON Schemas
(``../../schemas``, golden samples and vendored upstream documents left out) as package data, ``dcm_status_contracts/schemas/``.
An editable install needs no copy: ``schemas.schemas_dir`` finds the checkout's ``schemas/``.
Nothing is built inside the source folder (it is the package): the build tree is a temporary folder."""

import atexit
import shutil
import tempfile
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent
SCHEMAS = HERE.parent.parent / "schemas"
LEFT_OUT = shutil.ignore_patterns("samples", "upstream", "__pycache__", ".*")  # upstream: test-only copies
BUILD_BASE = tempfile.mkdtemp(prefix="dcm-status-contracts-build-")
atexit.register(shutil.rmtree, BUILD_BASE, True)


class BuildWithSchemas(build_py):
    def find_package_modules(self, package, package_dir):
        """This folder's modules, but this script."""
        modules = super().find_package_modules(package, package_dir)
        return [m for m in modules if Path(m[2]).resolve() != HERE / "setup.py"]

    def run(self):
        super().run()
        if getattr(self, "editable_mode", False):
            return
        if not (SCHEMAS / "envelope").is_dir():
            raise SystemExit(f"dcm-status-contracts: no JSON Schemas at {SCHEMAS}: build from the repository")
        target = Path(self.build_lib) / "dcm_status_contracts" / "schemas"
        shutil.rmtree(target, ignore_errors=True)
        shutil.copytree(SCHEMAS, target, ignore=LEFT_OUT)


setup(cmdclass={"build_py": BuildWithSchemas}, options={"build": {"build_base": BUILD_BASE}})
