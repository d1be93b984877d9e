"""Render docs/mappings.md from the provider kit's mapping tables (sdk/dcm_status_sdk/mappings/).

    python -m infra.mappings_doc > docs/mappings.md

tests/unit/test_mappings.py checks the file is what this renders, so the document and the
tables cannot drift apart.
"""

from __future__ import annotations

from typing import Any

from dcm_status_sdk.mapping import MappingTable

TABLES = ["aws-ec2", "azure-vm", "vmware-vm", "kubernetes-pod", "kubernetes-deployment", "kubevirt-vmi",
          "kubernetes-cluster", "kcli-vm", "cnpg-database"]

INTRO = """# Mapping tables: a cloud's raw states onto the generic enums

The provider kit maps raw states with tables kept as data (`sdk/dcm_status_sdk/mappings/*.json`),
one small rule engine (`sdk/dcm_status_sdk/mapping.py`) reading them:

```python
from dcm_status_sdk import MappingTable
status = MappingTable.load("aws-ec2").map(state="terminated", stateReason="Server.SpotInstanceTermination")
# MappedStatus(status='FAILED', raw='terminated (stateReason=Server.SpotInstanceTermination)', known=True, rule=5)
reporter.report("vm", "i-0abc", status)  # the raw value goes along as the reason
```

Each table starts from the status-reporting proposal's table and adds what the real APIs return.
Where the proposal gives one raw state two readings (EC2 `stopping`, EC2 `terminated`, VMware
`PoweredOff`), the table decides with the context that tells them apart, and says why below.
Rules are tried in order and the first whose conditions all hold wins (`*`: anything; a list: any
of; `not`, `ne`, `present`). A raw state no rule knows maps to the conservative default, UNKNOWN,
with the raw value kept (`known` is False, and the platform stores it flagged, never dropped).

To add a table: write `mappings/{name}.json` (`resourceType`, `inputs` with the raw state first,
`rules`, `default`, `decisions`, `sources`), add its name to `infra/mappings_doc.py`, regenerate this
file (`python -m infra.mappings_doc > docs/mappings.md`) and add rows for its decisions to
`tests/unit/test_mappings.py`; every rule is checked reachable, every status in its type's enum,
when the table loads and in the tests.

This file is generated from the tables.
"""


def _cond(value: Any) -> str:
    if isinstance(value, list):
        return " or ".join(_cond(v) for v in value)
    if isinstance(value, dict):
        (op, arg), = value.items()
        return {"not": f"not {_cond(arg)}", "ne": f"≠ {arg}", "present": "set" if arg else "unset"}[op]
    if isinstance(value, bool):
        return str(value).lower()
    return f"`{value}`"


def render() -> str:
    out = [INTRO]
    for name in TABLES:
        table = MappingTable.load(name)
        doc = table.doc
        out.append(f"## `{name}` ({table.resource_type})\n\n{doc['description']}\n")
        out.append("| # | when | status | why |\n| ---: | :--- | :--- | :--- |")
        for i, rule in enumerate(table.rules):
            when = ", ".join(f"{k} {_cond(v)}" for k, v in rule.when.items())
            out.append(f"| {i} | {when} | **{rule.status}** | {rule.why} |")
        out.append(f"| | anything else | **{table.default}** | the raw value kept |\n")
        out.append("Inputs: " + "; ".join(f"`{k}`: {v}" for k, v in doc["inputs"].items()) + ".\n")
        out.append("Decisions:\n\n" + "\n".join(f"- {d}" for d in doc["decisions"]) + "\n")
        out.append("Sources: " + "; ".join(doc["sources"]) + ".\n")
    return "\n".join(out)


if __name__ == "__main__":
    print(render(), end="")
