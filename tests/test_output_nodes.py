"""``-o`` onto something that is not a regular file writes through it (issue 19, item 16).

A FIFO, a character device or a symbolic link to one (``-o /dev/stdout``; as root ``-o
/dev/full``) was replaced by a regular file: the atomic writer renamed its temporary file over
the node. Only a regular file (or a new name) is replaced; anything else is written through, in
place, and stays what it is. Devices are made here with ``mknod`` (as root; else skipped) and
``/dev/stdout`` is imitated by a link to a pipe's ``/proc/self/fd`` entry, so no system node is
ever touched.
"""

from __future__ import annotations

import gzip
import json
import os
import stat
import threading

import pytest

import dtrace
from dtrace.cli.main import main
from dtrace.generate.synth import generate


@pytest.fixture(scope="module")
def out(tmp_path_factory):
    d = tmp_path_factory.mktemp("nodes")
    generate(str(d / "job"), ranks=2, steps=2, seed=3, kernels_per_step=8)
    dtrace.analyze(str(d / "job"), str(d / "out"), scheduler="sync")
    return str(d / "out")


def _reader(path: str, got: list[bytes]) -> threading.Thread:
    def run() -> None:
        with open(path, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=run, daemon=True)
    t.start()
    return t


@pytest.mark.timeout(60)
@pytest.mark.parametrize("via_link", [False, True])
def test_fifo_stays_a_fifo(out, tmp_path, capsys, via_link):
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    target = tmp_path / "link.json.gz" if via_link else tmp_path / "pipe.json.gz"
    if via_link:
        os.symlink(fifo, target)
    else:
        os.rename(fifo, target)
        fifo = target
    got: list[bytes] = []
    t = _reader(str(fifo), got)
    assert main(["timeline", out, "-o", str(target)]) == 0
    t.join(20)
    assert stat.S_ISFIFO(os.lstat(fifo).st_mode)
    assert os.path.islink(target) == via_link
    doc = json.loads(gzip.decompress(got[0]))
    assert doc["otherData"]["tracks"]
    capsys.readouterr()


@pytest.mark.timeout(60)
def test_link_to_a_pipe_like_dev_stdout(out, tmp_path, capsys):
    r, w = os.pipe()
    link = tmp_path / "stdout"
    os.symlink(f"/proc/self/fd/{w}", link)
    got: list[bytes] = []

    def drain() -> None:
        with os.fdopen(r, "rb") as f:
            got.append(f.read())

    t = threading.Thread(target=drain, daemon=True)
    t.start()
    try:
        assert main(["kernels", out, "-o", str(link)]) == 0
    finally:
        os.close(w)
    t.join(20)
    assert os.path.islink(link)
    assert got[0].startswith(b"DETAILED GPU KERNEL ANALYSIS")
    capsys.readouterr()


def _device(tmp_path, name: str, minor: int) -> str:
    path = str(tmp_path / name)
    try:
        os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(1, minor))  # 1,3: null; 1,7: full
    except PermissionError:
        pytest.skip("making a device node needs root")
    return path


def test_character_devices_stay_devices(out, tmp_path, capsys):
    null = _device(tmp_path, "null", 3)
    assert main(["report", out, "-o", null]) == 0
    assert stat.S_ISCHR(os.lstat(null).st_mode)
    full = _device(tmp_path, "full", 7)
    assert main(["timeline", out, "-o", full]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "No space left on device" in err, err
    assert stat.S_ISCHR(os.lstat(full).st_mode)
    link = tmp_path / "to-null.html"
    os.symlink(null, link)
    assert main(["report", out, "-o", str(link)]) == 0
    assert os.path.islink(link) and stat.S_ISCHR(os.lstat(null).st_mode)


def test_regular_files_and_links_to_them(out, tmp_path, capsys):
    plain = tmp_path / "k.txt"
    plain.write_text("old")
    assert main(["kernels", out, "-o", str(plain)]) == 0
    assert plain.read_text().startswith("DETAILED GPU KERNEL ANALYSIS")
    real = tmp_path / "real.txt"
    real.write_text("old")
    link = tmp_path / "k-link.txt"
    os.symlink(real, link)
    assert main(["kernels", out, "-o", str(link)]) == 0
    assert os.path.islink(link) and real.read_text().startswith("DETAILED GPU KERNEL ANALYSIS")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k-link.txt", "k.txt", "real.txt"]  # no temporary left
    capsys.readouterr()
