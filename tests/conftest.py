"""Test-wide settings. The functions run in local mode (no OIDC tokens) in every
tier, with the settings the topology declares; tests/unit/test_auth.py covers
production mode explicitly."""

import os

from infra.topology import load

os.environ.setdefault("DCM_PROJECT", "dcm-test")
os.environ.setdefault("DCM_LOCAL_MODE", "1")
for _name, _value in load().env().items():  # what the deployers set from infra/topology.yaml
    os.environ.setdefault(_name, _value)


import pytest  # noqa: E402


@pytest.fixture(autouse=True)
def _firestore_breaker_closed():
    """Each test starts with the instance's Firestore circuit breaker closed (a simulated outage in one
    test must not fail the next one fast)."""
    from shared.runtime.firestore import BREAKER

    BREAKER.answered()
    yield
    BREAKER.answered()
