"""The CloudEvents ``sequence`` of one source: it only increases, across restarts too.

The platform orders two reports of one resource from one source by their sequence
(``shared/upsert/store.py``, ``compare``), so a sequence that went back after a restart
would make every new report look stale. Two guards, either enough on its own:

- the next value is never below the clock in microseconds since the epoch, so a restart
  (even without state) continues above anything issued before, unless the clock stepped
  back or more than a million reports per second were made;
- with a state file, values are reserved in blocks: the file holds the end of the reserved
  block (written before any value in it is used, atomically), and a restart starts at it.

Values are 20-digit zero-padded strings: they compare as strings the way they do as numbers,
in structured and binary mode alike (ingest pads integers to the same width).
"""

from __future__ import annotations

import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Callable

DIGITS = 20
BLOCK = 10_000  # values reserved per write of the state file


def _micros() -> int:
    return time.time_ns() // 1000


class SequenceCounter:
    """Thread-safe; ``path`` None: the clock guard only."""

    def __init__(self, path: str | Path | None = None, clock: Callable[[], int] = _micros):
        self._path = Path(path) if path else None
        self._clock = clock
        self._lock = threading.Lock()
        self._last = self._read()
        self._reserved = self._last

    def _read(self) -> int:
        if self._path is None or not self._path.exists():
            return 0
        text = self._path.read_text().strip()
        try:
            return int(text)
        except ValueError as exc:
            raise ValueError(f"sequence file {self._path} holds {text[:40]!r}, not an integer") from exc

    def _reserve(self, upto: int) -> None:
        assert self._path is not None
        self._path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=self._path.parent, prefix=self._path.name, suffix=".tmp")
        with os.fdopen(fd, "w") as f:
            f.write(f"{upto}\n")
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self._path)
        self._reserved = upto

    def next(self) -> str:
        with self._lock:
            value = max(self._last + 1, self._clock())
            if self._path is not None and value > self._reserved:
                self._reserve(value + BLOCK)
            self._last = value
            return f"{value:0{DIGITS}d}"
