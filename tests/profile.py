"""How many generated inputs each property-based test tries: the full count, or the edit loop's (issue 41).

``DCM_TEST_PROFILE=check`` (what ``make check`` sets): a fifth of each test's inputs, at least ten
(``examples``), and the hypothesis profile "check" for a test that names no count; unset or ``full``
(``make test``, CI): every input each test names. The same properties are checked either way, on fewer
inputs while editing. ``DCM_FUZZ_EXAMPLES`` sets the fuzz tests' count outright (``make reliability``).
"""

from __future__ import annotations

import os

from hypothesis import settings

PROFILES = ("full", "check")
CHECK_SHARE = 5  # the edit loop tries a fifth of the inputs ...
CHECK_LEAST = 10  # ... and never fewer than this
HYPOTHESIS_DEFAULT = 100  # hypothesis' own count for a test that names none


def profile() -> str:
    name = os.environ.get("DCM_TEST_PROFILE", "full")
    if name not in PROFILES:
        raise ValueError(f"DCM_TEST_PROFILE={name!r}: one of {', '.join(PROFILES)}")
    return name


def examples(full: int, fuzz: bool = False) -> int:
    """The inputs a test tries: ``full`` in the full profile, a fifth (at least ten) in the edit loop's;
    a fuzz test's (``fuzz``) whatever ``DCM_FUZZ_EXAMPLES`` says when it is set."""
    if fuzz and os.environ.get("DCM_FUZZ_EXAMPLES"):
        return int(os.environ["DCM_FUZZ_EXAMPLES"])
    return full if profile() == "full" else max(CHECK_LEAST, full // CHECK_SHARE)


def load() -> None:
    """Registers both hypothesis profiles and loads the one ``DCM_TEST_PROFILE`` names."""
    settings.register_profile("full", settings())
    settings.register_profile("check", max_examples=max(CHECK_LEAST, HYPOTHESIS_DEFAULT // CHECK_SHARE))
    settings.load_profile(profile())
