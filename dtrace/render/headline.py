"""The first line of ``dtrace analyze``'s summary, from the manifest alone (no pandas: the
up-to-date run prints it without loading a table)."""

from __future__ import annotations

from ..core.records import Manifest


def headline(m: Manifest) -> str:
    """The first line of the summary: inputs, parts, failures, run time (or that the results
    are up to date). A count not recorded (``dtrace nsys-stats``) reads 0.

    Examples
    --------
    >>> headline(Manifest(n_inputs=2, n_parts=2, n_failed=0, seconds=1.5, workers=2))
    'dtrace: 2 inputs, 2 (rank, device) parts, 0 failed, 1.50 s on 2 worker(s)\\n'
    """
    n_inputs, n_parts = m.n_inputs or 0, m.n_parts or 0
    if m.up_to_date:
        return (
            f"dtrace: {n_inputs} inputs, {n_parts} (rank, device) parts: results up to "
            f"date (inputs, settings and dtrace unchanged since the run of {'?' if m.created is None else m.created}; "
            "--recompute or --no-cache analyses again)\n"
        )
    workers = 1 if m.workers is None else m.workers
    return (
        f"dtrace: {n_inputs} inputs, {n_parts} (rank, device) parts, "
        f"{m.n_failed or 0} failed, {m.seconds or 0:.2f} s on {workers} worker(s)\n"
    )
