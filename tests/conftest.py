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

from tests import durations, profile  # noqa: E402

profile.load()  # the edit loop's fewer generated inputs (DCM_TEST_PROFILE=check) or the full count


def pytest_addoption(parser: pytest.Parser) -> None:
    durations.add_options(parser)  # --tier-durations=N: where the time went, tier by tier


def pytest_configure(config: pytest.Config) -> None:
    durations.configure(config)


@pytest.fixture(autouse=True)
def _firestore_breaker_closed():
    """Each test starts with the instance's Firestore circuit breaker closed (a simulated outage in one
    test must not fail the next one fast)."""
    from shared.runtime.firestore import BREAKER

    BREAKER.answered()
    yield
    BREAKER.answered()


@pytest.fixture
def logged():
    """The JSON lines the functions' loggers (``dcm``) write during the test: ``logged()`` parses them,
    ``logged.text()`` is the text as written."""
    import io
    import json
    import logging

    from shared.runtime.logs import CloudLoggingFormatter

    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(CloudLoggingFormatter())
    root = logging.getLogger("dcm")
    root.addHandler(handler)

    def lines() -> list[dict]:
        return [json.loads(line) for line in stream.getvalue().splitlines()]

    lines.text = stream.getvalue  # type: ignore[attr-defined]
    yield lines
    root.removeHandler(handler)


@pytest.fixture
def spans():
    """The spans ended during the test (``spans()``, ``spans("ingest")``), every trace recorded."""
    from shared.runtime import settings, tracing
    from tests.fakes import SpanRecorder

    recorder = SpanRecorder()
    yield recorder.spans
    tracing.configure("test", settings.from_env())  # spans made, none kept, as before the test
