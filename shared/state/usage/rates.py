"""Rate cards: a price per resource-hour in a billable state.

    currency: EUR
    resourceTypes:          # price per hour, per resource type
      vm: 0.045
      volume: 0.0002
    providers:              # optional: per-provider prices override the above
      aws:
        vm: 0.052
    default: 0.0            # optional: price for anything not listed

A resource type with no price (and no ``default``) is *unpriced*: the report
shows its hours and no cost, rather than a made-up zero.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Mapping

import yaml


class RateCardError(ValueError):
    pass


def _price(value: Any, where: str) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0:
        raise RateCardError(f"{where}: price must be a number >= 0, got {value!r}")
    return float(value)


@dataclass(frozen=True)
class RateCard:
    currency: str
    resource_types: Mapping[str, float]
    providers: Mapping[str, Mapping[str, float]] = field(default_factory=dict)
    default: float | None = None

    def rate(self, provider: str, resource_type: str) -> float | None:
        """Price per hour, or None when this card does not price it."""
        per_provider = self.providers.get(provider, {})
        if resource_type in per_provider:
            return per_provider[resource_type]
        if resource_type in self.resource_types:
            return self.resource_types[resource_type]
        return self.default

    @classmethod
    def from_dict(cls, doc: Mapping[str, Any]) -> "RateCard":
        if not isinstance(doc, Mapping):
            raise RateCardError("a rate card is a mapping with currency and resourceTypes")
        unknown = set(doc) - {"currency", "resourceTypes", "providers", "default"}
        if unknown:
            raise RateCardError(f"unknown keys {sorted(unknown)}; expected currency, resourceTypes, providers, default")
        currency = doc.get("currency")
        if not isinstance(currency, str) or not currency:
            raise RateCardError("currency: required, e.g. EUR")
        types = doc.get("resourceTypes") or {}
        if not isinstance(types, Mapping):
            raise RateCardError("resourceTypes: a mapping of resource type to price per hour")
        providers = doc.get("providers") or {}
        if not isinstance(providers, Mapping) or not all(isinstance(v, Mapping) for v in providers.values()):
            raise RateCardError("providers: a mapping of provider to {resource type: price per hour}")
        default = doc.get("default")
        return cls(
            currency=currency,
            resource_types={str(t): _price(v, f"resourceTypes.{t}") for t, v in types.items()},
            providers={str(p): {str(t): _price(v, f"providers.{p}.{t}") for t, v in m.items()}
                       for p, m in providers.items()},
            default=None if default is None else _price(default, "default"),
        )

    @classmethod
    def load(cls, path: str | Path) -> "RateCard":
        try:
            doc = yaml.safe_load(Path(path).read_text())
        except yaml.YAMLError as exc:
            raise RateCardError(f"{path}: not YAML: {exc}") from exc
        try:
            return cls.from_dict(doc)
        except RateCardError as exc:
            raise RateCardError(f"{path}: {exc}") from exc
