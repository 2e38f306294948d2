"""Type stub of the compiled scanner (``_scan.c``; see ``_scanned.py``)."""

from typing import Any

class Scanner:
    strings: list[str]
    codes: dict[str, int]
    def __init__(self) -> None: ...
    def scan(self, text: Any, /) -> tuple[Any, ...] | None: ...

def join_spans(text: Any, spans: Any, sep: int, /) -> bytes: ...
