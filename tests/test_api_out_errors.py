"""``dtrace.analyze(..., out=X)`` where X cannot hold results: a DtraceError of one line naming
the path, raised before any input is read, never a raw OSError (issue 13)."""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest
from test_bad_input import GOOD, write

import dtrace
from dtrace.errors import DtraceError
from dtrace.execution import tasks


@pytest.fixture
def trace(tmp_path, monkeypatch):
    """One good input; reading any input during these tests is a failure (the checks come first)."""
    path = write(tmp_path / "rank-0.json", GOOD)

    def no_work(*a, **k):
        raise AssertionError("an input was read before the results folder was checked")

    monkeypatch.setattr(tasks, "ingest_many", no_work)  # what an ingest task calls
    return path


def refused(trace, out, needle, **kw) -> str:
    with pytest.raises(DtraceError) as ei:
        dtrace.analyze(trace, out, scheduler="sync", **kw)
    msg = str(ei.value)
    assert "\n" not in msg and needle in msg, msg
    assert not isinstance(ei.value, OSError)
    return msg


def test_out_is_a_file(tmp_path, trace):
    out = tmp_path / "out"
    out.write_text("x")
    msg = refused(trace, out, "not a folder")
    assert msg.startswith(f"{out}:")
    assert out.read_text() == "x"


def test_out_under_a_file(tmp_path, trace):
    (tmp_path / "f").write_text("x")
    msg = refused(trace, tmp_path / "f" / "out", "cannot create the results folder")
    assert str(tmp_path / "f" / "out") in msg


def test_out_cache_is_a_file(tmp_path, trace):
    out = tmp_path / "out"
    out.mkdir()
    (out / "cache").write_text("x")
    msg = refused(trace, out, "not a folder")
    assert msg.startswith(f"{out / 'cache'}:")


def test_cache_argument_is_a_file(tmp_path, trace):
    (tmp_path / "c").write_text("x")
    msg = refused(trace, tmp_path / "out", "not a folder", cache=str(tmp_path / "c"))
    assert msg.startswith(f"{tmp_path / 'c'}:")


def test_manifest_is_a_folder(tmp_path, trace):
    out = tmp_path / "out"
    (out / "manifest.json").mkdir(parents=True)
    msg = refused(trace, out, "is a folder")
    assert str(out / "manifest.json") in msg
    assert sorted(os.listdir(out)) == ["manifest.json"]  # no cache made: refused before any work


@pytest.fixture
def read_only(tmp_path):
    """A folder nobody may write into: mode 555, and for root (whom modes do not stop) the
    immutable attribute (``chattr +i``), which stops root too."""
    d = tmp_path / "ro"
    d.mkdir()
    d.chmod(0o555)
    immutable = False
    if os.geteuid() == 0:
        if (
            shutil.which("chattr") is None
            or subprocess.run(["chattr", "+i", str(d)], capture_output=True).returncode != 0
        ):
            d.chmod(0o755)
            pytest.skip("running as root and cannot make a folder immutable here")
        immutable = True
    try:
        yield d
    finally:
        if immutable:
            subprocess.run(["chattr", "-i", str(d)], check=True)
        d.chmod(0o755)


def test_read_only_out(read_only, trace, tmp_path):
    # the cache elsewhere (writable): the results folder itself is what cannot be written
    msg = refused(trace, read_only, "cannot write results there", cache=str(tmp_path / "cache"))
    assert msg.startswith(f"{read_only}:")
    assert os.listdir(read_only) == []


def test_read_only_out_with_its_cache(read_only, trace):
    refused(trace, read_only, str(read_only))
    assert os.listdir(read_only) == []


def test_read_only_cache(read_only, trace, tmp_path):
    msg = refused(trace, tmp_path / "out", "cannot write to the cache folder", cache=str(read_only))
    assert msg.startswith(f"{read_only}:")
