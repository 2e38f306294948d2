"""Stable integer ids for string pids/tids (same string → same id in every file and run)."""

from __future__ import annotations

import hashlib


class StableIds:
    """Map ints to themselves and strings to a stable 48-bit hash, caching each string."""

    def __init__(self) -> None:
        self._cache: dict[str, int] = {}

    def __call__(self, v: object) -> int:
        if isinstance(v, int):
            return v
        s = str(v)
        got = self._cache.get(s)
        if got is None:
            try:
                got = int(s)
            except ValueError:
                got = (1 << 48) + int.from_bytes(hashlib.blake2b(s.encode(), digest_size=6).digest(), "little")
            self._cache[s] = got
        return got
