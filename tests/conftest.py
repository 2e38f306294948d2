import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest-xdist's workers get COLUMNS=80 from execnet:
    os.environ.pop("COLUMNS", None)  # the tests see what a run without workers sees (160 when
    os.environ.pop("LINES", None)  # output is not a terminal; a test that wants a width sets it)
SHARED = os.environ.get("DTRACE_SHARED", os.path.join(ROOT, "..", "shared"))
TRACES = os.path.join(SHARED, "traces")


def shared(*parts: str) -> str:
    p = os.path.join(TRACES, *parts)
    if not os.path.exists(p):
        pytest.skip(f"shared trace not available: {p}")
    return p


@pytest.fixture
def copy_shared(tmp_path):
    """Copy a shared trace into tmp_path under a new name (for renamed-file tests)."""

    def _copy(rel: str, name: str) -> str:
        dst = tmp_path / name
        shutil.copy(shared(*rel.split("/")), dst)
        return str(dst)

    return _copy
