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

import functools
import re
from dataclasses import dataclass
from typing import Any, Iterable, Mapping

from .diff import escape

OUTPUT_FIELDS = ("output_spec", "outputs")  # the data fields, and the resource document's fields, alike
REDACTED = "[redacted]"
# Names of a credential in every provider's vocabulary, each matched as words of a key (below): hidden unless
# DCM_OUTPUT_REDACT says else. Two spellings where providers write a compound as one word or two.
DEFAULT_NAMES = ("password", "passwd", "pwd", "passphrase", "secret", "token", "private_key", "privatekey",
                 "api_key", "apikey", "access_key", "accesskey", "credential", "credentials", "kubeconfig",
                 "kube_config")
NONE = "none"  # DCM_OUTPUT_REDACT=none: nothing is hidden
# A key whose last word says what it counts or points to is about a credential, not the credential
# (``token_count``, ``password_length``, ``secret_name``, ``token_type``): shown. ``id`` is not among them
# (Vault's ``secret_id`` is one), nor ``hint``.
DESCRIPTORS = frozenset({"count", "length", "len", "type", "name", "ref", "arn", "path", "file", "policy",
                         "expiry", "expires", "expiration", "ttl", "version", "enabled", "required", "rotation"})
# The words of a key: camelCase and acronyms split (``SSHPrivateKey``: ssh, private, key), as are ``_ - . `` and
# spaces (``User Id``); digits are words of their own.
_WORD = re.compile(r"[A-Z]+(?=[A-Z][a-z])|[A-Z]?[a-z]+|[A-Z]+|[0-9]+")
# A URL's userinfo with a password: everything from the ``:`` after the user to the LAST ``@`` of the run of
# non-blank characters (``postgres://app:pa/ss@host``, ``amqp://u:p@ss@mq``: a password may hold ``/`` or ``@``
# its writer did not escape). A URL whose path or query holds an ``@`` after a ``:`` is masked from there:
# shown less, never more. Found by scanning, not by one regular expression: linear in the string's length.
_USER_END = re.compile(r"[:/?#@\s]")
_RUN_END = re.compile(r"\s|$")
# One ``name=value`` of a URL's query or a connection string (``jdbc:...?user=app&password=x``,
# ``Server=db;User Id=app;Password=x``): the value runs to the next ``&``, ``;`` or line end (blanks and ``#``
# included: a connection string's password may hold them), or is braced or quoted (``Pwd={a;b}``).
_PARAMETER = re.compile(r"(^|[?&;])(\s*)([A-Za-z][\w .\-]{0,63}?)=(\{[^}]*\}?|\"[^\"]*\"?|'[^']*'?|[^&;\r\n]*)",
                        re.MULTILINE)


@functools.lru_cache(maxsize=4096)
def words(name: str) -> tuple[str, ...]:
    """The lower-case words of a key name: ``adminPassword`` -> (admin, password), ``aws_secret_access_key``
    -> (aws, secret, access, key)."""
    return tuple(w.lower() for w in _WORD.findall(name))


def _same_word(word: str, named: str) -> bool:
    return word == named or word == named + "s"  # api_keys, secrets


def _names_a_credential(key: tuple[str, ...], phrase: tuple[str, ...]) -> bool:
    """Whether the words ``phrase`` appear in ``key`` in a row, and ``key`` is not merely about them."""
    n = len(phrase)
    for start in range(len(key) - n + 1):
        if all(_same_word(key[start + i], phrase[i]) for i in range(n)):
            rest = key[start + n:]
            if not (rest and rest[-1] in DESCRIPTORS):
                return True
    return False


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


@functools.lru_cache(maxsize=64)
def _phrases(names: frozenset[str]) -> tuple[tuple[str, ...], ...]:
    return tuple(sorted({words(n) for n in names if words(n)}))


def mask_url_passwords(text: str) -> str:
    """``text`` with each URL's password (``scheme://user:PASSWORD@host``, up to the last ``@`` of its run of
    non-blank characters) replaced by ``[redacted]``; the user and the host are kept."""
    out: list[str] = []
    done = search = 0  # text[:done] is in out; the next "://" is looked for from search
    while (sep := text.find("://", search)) != -1:
        run_end = _RUN_END.search(text, sep).start()
        at = text.rfind("@", sep + 3, run_end)
        if at == -1:  # no userinfo in this run, nor in any URL later in it
            search = run_end
            continue
        user_end = _USER_END.search(text, sep + 3, at)
        if sep and text[sep - 1].isalnum() and user_end is not None and text[user_end.start()] == ":":
            out.append(text[done:user_end.start() + 1] + REDACTED)
            done = at
        search = at  # what follows the run's last @ holds no userinfo of this run
    out.append(text[done:])
    return "".join(out)


@dataclass(frozen=True)
class Redaction:
    """The output values readers see as ``[redacted]`` (what each reader sees: docs/security.md).

    ``names``: credential names, each matched as words of a key at any depth of an output map
    (``password`` hides ``db_password``, ``adminPassword``, ``DB-PASSWORD``; ``private_key`` hides
    ``ssh_private_key`` and ``sshPrivateKey``), case-insensitive, a plural too; a key whose last word is
    a descriptor (``token_count``, ``secret_name``: ``DESCRIPTORS``) is shown. ``pointers``: JSON pointers
    into the resource (``/output_spec/db/password``), hidden with all below them. ``urls``: in an output
    string, a URL's password (``scheme://user:PASSWORD@host``, up to the last ``@``) and the value of a
    query or connection-string parameter the names name (``?password=``, ``;Pwd=``) are masked too.
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

    def names_a_credential(self, key: str) -> bool:
        """Whether a key (of an output map, of a URL's query) is one of the names, by its words."""
        found = words(key)
        return any(_names_a_credential(found, phrase) for phrase in _phrases(self.names))

    def hides(self, pointer: str) -> bool:
        """Whether the value at ``pointer`` (into a resource) is hidden."""
        if not is_output_pointer(pointer):
            return False
        if any(pointer == p or pointer.startswith(p + "/") for p in self.pointers):
            return True
        return any(self.names_a_credential(_unescape(t)) for t in pointer.split("/")[2:])

    def text(self, value: str) -> str:
        """An output string as a reader sees it: a URL's password and a named parameter's value masked."""
        if not self.urls:
            return value
        value = mask_url_passwords(value) if "@" in value else value
        if "=" not in value:
            return value
        return _PARAMETER.sub(lambda m: f"{m.group(1)}{m.group(2)}{m.group(3)}={REDACTED}"
                              if m.group(4) and self.names_a_credential(m.group(3)) else m.group(0), value)

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
        if isinstance(value, str):
            return self.text(value)
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
