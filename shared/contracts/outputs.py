"""What a resource offers the resources that depend on it: ``output_spec`` and ``outputs`` in a status
event's data, and how a credential among them is kept from the readers that need not see it.

Upstream (read file by file, the code is not ours):

- dcm-project/control-plane, ``internal/sp/consumer/consumer.go`` at feead82: the status payload's
  ``OutputSpec map[string]any `json:"output_spec,omitempty"```; ``internal/sp/store/resource_manager/
  service_instance.go`` ``UpdateStatus`` at the same commit writes the ``output_spec`` column only when
  the decoded map is not nil: an event that carries a map (``{}`` included) replaces it whole, one that
  omits it or sends ``null`` keeps it. It is handed to placement on RUNNING, and its key names (never its
  values) are logged.
- dcm-project/enhancements PR #99, ``enhancements/cross-provider-outputs/cross-provider-outputs.md``:
  first commit 536a41c names the map ``outputs`` (connection strings, hosts, ports); later revisions
  rename it ``output_spec`` and propose a key-wise merge. Both spellings are read here, the same way.

Here, as the control-plane does: each map is replaced whole by a newer event that carries it, kept
when a newer event omits it or sends null, ``{}`` clears it; an older (stale) event never touches it.
Replacing whole (not merging keys) is what makes the stored map the newest event's map whatever order
events arrive in: a merge would depend on which stale events were skipped.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .diff import escape

OUTPUT_FIELDS = ("output_spec", "outputs")  # the data fields, and the resource document's fields, alike
REDACTED = "[redacted]"
# Key names that hold a credential in every provider's vocabulary: hidden unless DCM_OUTPUT_REDACT says else.
DEFAULT_NAMES = ("password", "passwd", "secret", "token", "private_key", "privatekey", "api_key", "apikey",
                 "credentials", "client_secret")
NONE = "none"  # DCM_OUTPUT_REDACT=none: nothing is hidden
_URL_PASSWORD = re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://[^/\s:@]*):[^@/\s]*@")


def carried(data: Mapping[str, Any]) -> dict[str, dict[str, Any]]:
    """The output maps an event's data carries (a field that is absent or null is not carried)."""
    return {f: dict(data[f]) for f in OUTPUT_FIELDS if isinstance(data.get(f), Mapping)}


def kept(after: Mapping[str, Any], current: Mapping[str, Any] | None) -> dict[str, Any]:
    """``after`` (a resource as an update reports it) with each output map it does not carry kept from
    ``current`` (the stored state)."""
    out = dict(after)
    for f in OUTPUT_FIELDS:
        if out.get(f) is None and current and current.get(f) is not None:
            out[f] = current[f]
    return out


def differ(a: Mapping[str, Any] | None, b: Mapping[str, Any] | None) -> bool:
    """Whether two states hold different output maps."""
    return any((a or {}).get(f) != (b or {}).get(f) for f in OUTPUT_FIELDS)


def is_output_pointer(pointer: str) -> bool:
    return any(pointer == f"/{f}" or pointer.startswith(f"/{f}/") for f in OUTPUT_FIELDS)


def _unescape(token: str) -> str:
    return token.replace("~1", "/").replace("~0", "~")


@dataclass(frozen=True)
class Redaction:
    """The output values readers see as ``[redacted]`` (what each reader sees: docs/security.md).

    ``names``: key names (case-insensitive) hidden at any depth of an output map; ``pointers``: JSON
    pointers into the resource (``/output_spec/db/password``), hidden with all below them. Whatever the
    list, a URL's password (``scheme://user:PASSWORD@host``) in an output string is masked too.
    """

    names: frozenset[str] = frozenset()
    pointers: tuple[str, ...] = ()
    urls: bool = True

    @classmethod
    def default(cls) -> "Redaction":
        return cls(frozenset(DEFAULT_NAMES))

    @classmethod
    def parse(cls, text: str | None) -> "Redaction":
        """``DCM_OUTPUT_REDACT``: comma-separated key names and JSON pointers; unset: the default names;
        ``none``: nothing hidden. ValueError for a pointer outside the output maps."""
        if text is None or not text.strip():
            return cls.default()
        entries = [e.strip() for e in text.split(",") if e.strip()]
        if [e.lower() for e in entries] == [NONE]:
            return cls(urls=False)
        pointers = tuple(e for e in entries if e.startswith("/"))
        for p in pointers:
            if not is_output_pointer(p) or p in (f"/{f}" for f in OUTPUT_FIELDS):
                raise ValueError(f"{p!r}: a redacted pointer names a key inside "
                                 f"{' or '.join('/' + f for f in OUTPUT_FIELDS)} (e.g. /output_spec/db/password)")
        return cls(frozenset(e.lower() for e in entries if not e.startswith("/")), pointers)

    @property
    def active(self) -> bool:
        return bool(self.names or self.pointers or self.urls)

    def hides(self, pointer: str) -> bool:
        """Whether the value at ``pointer`` (into a resource) is hidden."""
        if not is_output_pointer(pointer):
            return False
        if any(pointer == p or pointer.startswith(p + "/") for p in self.pointers):
            return True
        return any(_unescape(t).lower() in self.names for t in pointer.split("/")[2:])

    def value(self, value: Any, pointer: str) -> Any:
        """``value``, found at ``pointer``, as a reader sees it (a copy where anything is hidden)."""
        if not is_output_pointer(pointer):
            return value
        if self.hides(pointer):
            return REDACTED
        if isinstance(value, Mapping):
            return {k: self.value(v, f"{pointer}/{escape(k)}") for k, v in value.items()}
        if isinstance(value, list):
            return [self.value(v, f"{pointer}/{i}") for i, v in enumerate(value)]
        if isinstance(value, str) and self.urls:
            return _URL_PASSWORD.sub(lambda m: f"{m.group(1)}:{REDACTED}@", value)
        return value

    def resource(self, doc: Mapping[str, Any]) -> dict[str, Any]:
        """A resource document (or a history entry, a state) as a reader sees it."""
        out = dict(doc)
        if self.active:
            for f in OUTPUT_FIELDS:
                if isinstance(out.get(f), Mapping):
                    out[f] = self.value(out[f], f"/{f}")
        return out

    def changes(self, found: Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
        """JSON-pointer changes as a reader sees them: a hidden value changed is still said to change."""
        return [{**c, "old": self.value(c["old"], c["attribute"]), "new": self.value(c["new"], c["attribute"])}
                for c in found]
