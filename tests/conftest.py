import os
import shutil

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
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
