"""The wire contracts have one import identity: the platform and the provider kit load the same modules
(dcm_status_contracts, its own distribution, source in shared/contracts/), so a name is one class in a
process and an SDK refusal is caught as the platform's."""

from __future__ import annotations

import importlib
import sys
import tomllib
from pathlib import Path

import dcm_status_contracts
import dcm_status_sdk
import pytest
from dcm_status_contracts import cloud_native_event, errors, pubsub_binding, schemas, status_report
from dcm_status_sdk import mapping, refusal, reporter

import shared.ingest.normalize
import shared.runtime.entrypoint

REPO = Path(__file__).resolve().parents[2]
CONTRACTS = REPO / "shared" / "contracts"


@pytest.mark.parametrize("name, platform", [
    ("Rejected", errors.Rejected), ("Reason", errors.Reason), ("BindingMode", pubsub_binding.BindingMode),
    ("ReportForm", status_report.ReportForm), ("Value", cloud_native_event.Value),
    ("DataType", cloud_native_event.DataType)])
def test_one_class_per_name(name, platform):
    assert getattr(dcm_status_sdk, name) is platform


def test_one_registry_and_one_error_hierarchy():
    assert mapping.registry is schemas.registry and mapping.registry() is schemas.registry()
    assert shared.ingest.normalize.registry() is schemas.registry()
    assert refusal.DcmError is reporter.DcmError is errors.DcmError
    assert shared.runtime.entrypoint.Rejected is dcm_status_sdk.Rejected


def test_an_sdk_refusal_is_caught_by_the_platform_s_except():
    refused = dcm_status_sdk.Rejected(dcm_status_sdk.Reason.SCHEMA_INVALID, "raised by the kit")
    try:
        raise refused
    except errors.Rejected as caught:  # the platform's except clause
        assert caught is refused and caught.reason is errors.Reason.SCHEMA_INVALID
    # and the entry point's ``except Rejected`` (dead-letter, then ack) is that very class
    assert shared.runtime.entrypoint.Rejected is type(refused)


def test_every_contract_module_is_loaded_once_under_its_one_name():
    loaded = [m for m in list(sys.modules.values()) if getattr(m, "__file__", None)
              and Path(m.__file__).resolve().is_relative_to(CONTRACTS)]
    assert loaded and all(m.__name__.startswith("dcm_status_contracts") for m in loaded)
    assert len({m.__file__ for m in loaded}) == len(loaded)
    assert Path(dcm_status_contracts.__file__).resolve().parent == CONTRACTS
    assert not [name for name in sys.modules if name.startswith(("shared.contracts", "dcm_status_sdk.contracts"))]


@pytest.mark.parametrize("other", ["shared.contracts", "shared.contracts.errors"])
def test_the_contracts_refuse_any_other_name(other):
    with pytest.raises(ImportError, match="dcm_status_contracts"):
        importlib.import_module(other)
    assert other not in sys.modules


def test_no_copy_and_no_stored_state_in_the_kit():  # no link anywhere: test_layout.py
    assert not (CONTRACTS / "state.py").exists() and not list((REPO / "sdk" / "dcm_status_sdk").rglob("state.py"))
    assert not (REPO / "sdk" / "dcm_status_sdk" / "contracts").exists()
    assert not (REPO / "sdk" / "dcm_status_sdk" / "schemas").exists()


def test_the_schemas_are_the_checkout_s_in_an_editable_install(monkeypatch, tmp_path):
    monkeypatch.delenv("DCM_SCHEMAS_DIR", raising=False)
    assert Path(schemas.schemas_dir()) == REPO / "schemas"  # no copy inside shared/contracts/
    assert not (CONTRACTS / "schemas").exists()
    monkeypatch.setenv("DCM_SCHEMAS_DIR", str(tmp_path))
    assert schemas.schemas_dir() == tmp_path


@pytest.mark.parametrize("pyproject", ["pyproject.toml", "sdk/pyproject.toml"])
def test_the_platform_and_the_sdk_depend_on_the_contracts(pyproject):
    with (REPO / pyproject).open("rb") as f:
        config = tomllib.load(f)
    assert [d for d in config["project"]["dependencies"] if d.startswith("dcm-status-contracts")], pyproject
    if pyproject == "pyproject.toml":
        assert "shared.contracts" in config["tool"]["setuptools"]["packages"]["find"]["exclude"]
