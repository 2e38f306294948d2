import os
import shutil

import pytest
from testpaths import ROOT, SHARED, TRACES, shared  # noqa: F401 - the names tests import from here too

if os.environ.get("PYTEST_XDIST_WORKER"):  # pytest-xdist's workers get COLUMNS=80 from execnet:
    os.environ.pop("COLUMNS", None)  # the tests see what a run without workers sees (160 when
    os.environ.pop("LINES", None)  # output is not a terminal; a test that wants a width sets it)


@pytest.fixture
def copy_shared(tmp_path):
    """Copy a shared trace into tmp_path under a new name (for renamed-file tests)."""

    def _copy(rel: str, name: str) -> str:
        dst = tmp_path / name
        shutil.copy(shared(*rel.split("/")), dst)
        return str(dst)

    return _copy
