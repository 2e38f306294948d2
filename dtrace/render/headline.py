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
    if m.get("up_to_date"):
        return (
            f"dtrace: {m.get('n_inputs', 0)} inputs, {m.get('n_parts', 0)} (rank, device) parts: results up to "
            f"date (inputs, settings and dtrace unchanged since the run of {m.get('created', '?')}; "
            "--recompute or --no-cache analyses again)\n"
        )
    return (
        f"dtrace: {m.get('n_inputs', 0)} inputs, {m.get('n_parts', 0)} (rank, device) parts, "
        f"{m.get('n_failed', 0)} failed, {m.get('seconds', 0):.2f} s on {m.get('workers', 1)} worker(s)\n"
    )
