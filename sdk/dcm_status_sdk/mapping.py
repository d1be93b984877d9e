"""A cloud's raw states onto the generic status enums: tables as data, one small rule engine.

A table (``mappings/{name}.json``) names its resource type, its inputs (the raw state and the
context that decides between readings: an EC2 state reason, an Azure provisioning state, a
running vSphere task, a pod's container reasons) and ordered rules; the first rule whose
conditions all hold gives the status. A condition on an input is:

- a string: equal, case forgiven (``"running"``); ``"*"``: anything, even absent;
- a number or a boolean: equal (``true`` does not match an absent input);
- a list: any of its conditions;
- ``{"not": c}``, ``{"ne": n}`` (a number other than n), ``{"present": true|false}``.

No rule: the table's conservative default (UNKNOWN), with the raw value kept in ``raw`` (the
reporter sends it as the reason) and ``known`` False. Tables are checked when they load: an
input no rule may name, a status outside the type's enum, a malformed condition is a
ValueError naming the table and the rule. The decisions behind each table are in its
``decisions`` and in docs/mappings.md.
"""

from __future__ import annotations

import functools
import importlib.resources
from dataclasses import dataclass, field
from typing import Any, Mapping

import orjson
from dcm_status_contracts.model import CommonStatus
from dcm_status_contracts.schemas import registry

UNKNOWN = CommonStatus.UNKNOWN.value  # every type's conservative default (ingest stores it as such)
_OPERATORS = frozenset({"not", "ne", "present"})


@dataclass(frozen=True)
class MappedStatus:
    status: str  # a status of the type's enum, or the default
    raw: str  # the raw state and its context, compact: "terminated (stateReason=Server.InternalError)"
    known: bool  # False: no rule matched, the default was used
    rule: int | None  # the index of the rule that matched


@dataclass(frozen=True)
class Rule:
    when: Mapping[str, Any]
    status: str
    why: str = ""


def _check_condition(cond: Any, where: str) -> None:
    if isinstance(cond, list):
        for c in cond:
            _check_condition(c, where)
    elif isinstance(cond, dict):
        if len(cond) != 1 or not set(cond) <= _OPERATORS:
            raise ValueError(f"{where}: a condition object is one of {sorted(_OPERATORS)}, not {sorted(cond)}")
        (op, arg), = cond.items()
        if op == "not":
            _check_condition(arg, where)
        elif op == "present" and not isinstance(arg, bool):
            raise ValueError(f"{where}: 'present' takes true or false")
    elif not isinstance(cond, (str, int, float, bool)):
        raise ValueError(f"{where}: {cond!r} is not a condition")


def _holds(cond: Any, value: Any) -> bool:
    if isinstance(cond, list):
        return any(_holds(c, value) for c in cond)
    if isinstance(cond, dict):
        (op, arg), = cond.items()
        if op == "not":
            return not _holds(arg, value)
        if op == "present":
            return (value not in (None, "")) == arg
        return isinstance(value, (int, float)) and not isinstance(value, bool) and value != arg  # ne
    if cond == "*":
        return True
    if isinstance(cond, bool) or isinstance(value, bool):
        return isinstance(value, bool) and value is cond
    if isinstance(cond, str):
        return isinstance(value, str) and value.lower() == cond.lower()
    return isinstance(value, (int, float)) and value == cond


@dataclass(frozen=True)
class MappingTable:
    name: str
    resource_type: str
    inputs: tuple[str, ...]  # the first one is the raw state itself
    rules: tuple[Rule, ...]
    default: str = UNKNOWN
    doc: Mapping[str, Any] = field(default_factory=dict, compare=False, repr=False)  # the table as written

    @staticmethod
    @functools.cache
    def load(name: str) -> "MappingTable":
        """A table shipped with the kit (``mappings/{name}.json``)."""
        path = importlib.resources.files(__package__) / "mappings" / f"{name}.json"
        if not path.is_file():
            shipped = sorted(p.name[:-5] for p in (importlib.resources.files(__package__) / "mappings").iterdir()
                             if p.name.endswith(".json"))
            raise ValueError(f"no mapping table {name!r}; shipped: {', '.join(shipped)}")
        return MappingTable.from_dict(orjson.loads(path.read_bytes()))

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "MappingTable":
        name = doc.get("mapping", "?")
        rtype = doc["resourceType"]
        current = registry().current.get(rtype)
        if current is None:
            raise ValueError(f"mapping {name}: unknown resource type {rtype!r}")
        allowed = set(current.statuses) | {UNKNOWN}
        inputs = tuple(doc["inputs"])
        rules = []
        for i, r in enumerate(doc["rules"]):
            where = f"mapping {name}, rule {i}"
            unknown = set(r["when"]) - set(inputs)
            if unknown:
                raise ValueError(f"{where}: input(s) {sorted(unknown)} not declared in 'inputs'")
            if r["status"] not in allowed:
                raise ValueError(f"{where}: status {r['status']!r} is not in the {rtype} enum {sorted(allowed)}")
            for cond in r["when"].values():
                _check_condition(cond, where)
            rules.append(Rule(dict(r["when"]), r["status"], r.get("why", "")))
        default = doc.get("default", UNKNOWN)
        if default not in allowed:
            raise ValueError(f"mapping {name}: default {default!r} is not in the {rtype} enum")
        return cls(name, rtype, inputs, tuple(rules), default, doc)

    def map(self, **inputs: Any) -> MappedStatus:
        unknown = set(inputs) - set(self.inputs)
        if unknown:
            raise ValueError(f"mapping {self.name} has no input(s) {sorted(unknown)}; its inputs: "
                             f"{', '.join(self.inputs)}")
        raw = self._raw(inputs)
        for i, rule in enumerate(self.rules):
            if all(_holds(cond, inputs.get(name)) for name, cond in rule.when.items()):
                return MappedStatus(rule.status, raw, True, i)
        return MappedStatus(self.default, raw, False, None)

    def _raw(self, inputs: Mapping[str, Any]) -> str:
        first, rest = self.inputs[0], self.inputs[1:]
        context = ", ".join(f"{k}={inputs[k]}" for k in rest if inputs.get(k) not in (None, ""))
        head = str(inputs.get(first, "")) if inputs.get(first) not in (None, "") else "-"
        return f"{head} ({context})" if context else head
