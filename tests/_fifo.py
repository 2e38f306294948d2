"""A FIFO helper: release every reader blocked opening a FIFO (it gets an empty file, EOF)."""

from __future__ import annotations

import os
import time


def release_fifo(path: str | os.PathLike[str], quiet: float = 1.5, timeout: float = 20.0) -> None:
    """Give every process blocked opening the FIFO ``path`` for reading an empty file (EOF),
    until nobody has opened it for ``quiet`` seconds."""
    deadline = time.monotonic() + timeout
    last = time.monotonic()
    while time.monotonic() - last < quiet and time.monotonic() < deadline:
        try:
            os.close(os.open(path, os.O_WRONLY | os.O_NONBLOCK))
            last = time.monotonic()
        except OSError:  # ENXIO: no reader right now
            pass
        time.sleep(0.05)
