"""Where the tests find the repository and the shared traces.

A module of its own, not ``conftest``: a Dask worker process that unpickles a test's function
imports the test module, and there ``import conftest`` could find the repository's root
``conftest.py`` first (it does under pytest-xdist); ``testpaths`` exists once.
"""

import os

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SHARED = os.environ.get("DTRACE_SHARED", os.path.join(ROOT, "..", "shared"))
TRACES = os.path.join(SHARED, "traces")


def shared(*parts: str) -> str:
    """The path of a shared trace; the test is skipped where the shared data set is missing."""
    p = os.path.join(TRACES, *parts)
    if not os.path.exists(p):
        pytest.skip(f"shared trace not available: {p}")
    return p
