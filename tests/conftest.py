"""Test-wide settings. The functions run in local mode (no OIDC tokens) in every
tier; tests/unit/test_auth.py covers production mode explicitly."""

import os

os.environ.setdefault("DCM_PROJECT", "dcm-test")
os.environ.setdefault("DCM_LOCAL_MODE", "1")
