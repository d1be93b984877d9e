"""Test-wide settings. The functions run in local mode (no OIDC tokens) in every
tier, with the settings the topology declares; tests/unit/test_auth.py covers
production mode explicitly."""

import os

from infra.topology import load

os.environ.setdefault("DCM_PROJECT", "dcm-test")
os.environ.setdefault("DCM_LOCAL_MODE", "1")
for _name, _value in load().env().items():  # what the deployers set from infra/topology.yaml
    os.environ.setdefault(_name, _value)
