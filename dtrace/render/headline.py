"""The first line of ``dtrace analyze``'s summary, from the manifest alone (no pandas: the
up-to-date run prints it without loading a table)."""

from __future__ import annotations

from typing import Any


def headline(manifest: dict[str, Any]) -> str:
    """The first line of the summary: inputs, parts, failures, run time (or that the results
    are up to date).

    Examples
    --------
    >>> headline({"n_inputs": 2, "n_parts": 2, "n_failed": 0, "seconds": 1.5, "workers": 2})
    'dtrace: 2 inputs, 2 (rank, device) parts, 0 failed, 1.50 s on 2 worker(s)\\n'
    """
    m = manifest

    def count(key: str) -> Any:  # absent or null (not recorded): 0
        return m.get(key) or 0

    created = "?" if m.get("created") is None else m["created"]
    if m.get("up_to_date"):
        return (
            f"dtrace: {count('n_inputs')} inputs, {count('n_parts')} (rank, device) parts: results up to "
            f"date (inputs, settings and dtrace unchanged since the run of {created}; "
            "--recompute or --no-cache analyses again)\n"
        )
    workers = 1 if m.get("workers") is None else m["workers"]
    return (
        f"dtrace: {count('n_inputs')} inputs, {count('n_parts')} (rank, device) parts, "
        f"{count('n_failed')} failed, {count('seconds'):.2f} s on {workers} worker(s)\n"
    )
