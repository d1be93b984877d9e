"""A clean virtualenv, and the installer a test fills one with (the deploy zips, the provider kit)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def create(env_dir: Path) -> Path:
    """A virtualenv at ``env_dir`` with nothing installed (pip neither); returns its python."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", "--clear", str(env_dir)], check=True)
    return env_dir / "bin" / "python"


def installer(python: Path) -> list[str]:
    """``pip install`` into ``python``'s virtualenv: with the uv the project installs itself with when it is
    there (the same index and package metadata as pip, in seconds: pip took 30-40 s of CPU), else the
    virtualenv's own pip, made first."""
    uv = Path(sys.executable).parent / "uv"
    if uv.exists():
        return [str(uv), "pip", "install", "--python", str(python)]
    subprocess.run([str(python), "-m", "ensurepip", "--default-pip"], check=True, capture_output=True)
    return [str(python), "-m", "pip", "install", "--disable-pip-version-check"]
