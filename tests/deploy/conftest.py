"""Deploy-tier tests: the Terraform configuration and the function deploy zips.

Nothing here touches Google Cloud or the emulators. Tests marked ``deploy``
create a virtualenv and install the functions' requirements from PyPI.
"""

from __future__ import annotations

import pytest

from tests.deploy import tf


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers", "deploy: builds the function deploy zips and installs them in a clean virtualenv (needs PyPI)")


@pytest.fixture(scope="session")
def config() -> tf.Config:
    """The parsed Terraform configuration (terraform/*.tf)."""
    return tf.load()


@pytest.fixture(scope="session")
def terraform() -> str:
    path = tf.terraform_binary()
    if path is None:
        pytest.skip("terraform binary not found on PATH (install Terraform >= 1.5 to run this test)")
    return path
