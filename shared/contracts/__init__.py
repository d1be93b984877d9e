"""dcm-status's wire contracts (the distribution dcm-status-contracts, source in shared/contracts/): what
crosses a topic, one module per contract with both directions (build and decode), and the identities,
schemas, limits, errors and times they share. The platform (shared/) and the provider kit
(dcm_status_sdk) both import it by this one name, so a class is one class in a process. No I/O but
reading its own schemas (``schemas.schemas_dir``); it imports nothing of the platform's."""

if __name__ != "dcm_status_contracts":
    raise ImportError(
        f"the wire contracts are imported as dcm_status_contracts, not {__name__}: "
        f"`from dcm_status_contracts import ...` (install it: pip install -e ./shared/contracts)",
        name=__name__)
