"""The cache of a results folder is ``OUT/cache``, always (issue 19, item 8).

A manifest's ``cache`` field only records where a run's cache was. A hand-edited (or copied)
manifest pointing at another folder's cache must not make ``dtrace tree``, ``dtrace timeline`` or
``dtrace.events`` read that folder, and above all must not make them delete anything there: the
sibling folder is hashed, file by file, before and after.
"""

from __future__ import annotations

import hashlib
import json
import os
import shutil

import pytest

import dtrace
from dtrace.cli.main import main
from dtrace.errors import UsageError
from dtrace.generate.synth import generate


def tree_hash(root: str) -> dict[str, str]:
    """Every file under ``root`` (links included, not followed) → sha256 of its bytes."""
    out = {}
    for d, _, files in os.walk(root):
        for f in files:
            p = os.path.join(d, f)
            with open(p, "rb") as fh:
                out[os.path.relpath(p, root)] = hashlib.sha256(fh.read()).hexdigest()
    return out


@pytest.fixture(scope="module")
def two_outs(tmp_path_factory):
    d = tmp_path_factory.mktemp("sib")
    generate(str(d / "job"), ranks=4, steps=2, seed=3, kernels_per_step=12)
    for out in ("V", "A"):
        dtrace.analyze(str(d / "job"), str(d / out), scheduler="sync")
    return d


def setup_victim(two_outs, tmp_path):
    """A copy of the two results folders; A's manifest names V's cache, and one of V's cached
    event files is damaged (reading it through A would drop V's entry)."""
    v, a = tmp_path / "V", tmp_path / "A"
    shutil.copytree(two_outs / "V", v)
    shutil.copytree(two_outs / "A", a)
    m = json.loads((a / "manifest.json").read_text())
    m["cache"] = str(v / "cache")
    (a / "manifest.json").write_text(json.dumps(m))
    for entry in sorted((v / "cache").iterdir()):
        events = sorted(entry.glob("events-*.parquet"))
        if events:
            data = bytearray(events[0].read_bytes())
            data[len(data) // 2] ^= 0xFF
            events[0].write_bytes(bytes(data))
    return str(v), str(a)


def test_an_edited_cache_field_is_not_followed(two_outs, tmp_path, capsys):
    v, a = setup_victim(two_outs, tmp_path)
    before = tree_hash(v)
    assert any(k.endswith("source.json") for k in before)
    assert main(["tree", a, "--rank", "0", "--op", "ProfilerStep#1"]) == 0
    assert main(["timeline", a, "-o", str(tmp_path / "t.json"), "--ranks", "0-3"]) == 0
    ev = dtrace.events(a).compute()
    assert sorted(set(ev.index)) == [0, 1, 2, 3]
    capsys.readouterr()
    assert tree_hash(v) == before  # nothing in V was read into a deletion, written or removed


def test_the_own_cache_is_the_one_read(two_outs, tmp_path, capsys):
    """With A's own cache gone, A's events are gone, whatever the manifest names: a one-line error
    (the field shown as a hint, not followed); the named folder is read only when passed."""
    v, a = setup_victim(two_outs, tmp_path)
    shutil.rmtree(os.path.join(v, "cache"))
    shutil.copytree(os.path.join(a, "cache"), os.path.join(v, "cache"))  # intact events, elsewhere
    shutil.rmtree(os.path.join(a, "cache"))
    with pytest.raises(UsageError, match="gone from .*A/cache"):
        dtrace.events(a)
    assert main(["timeline", a, "-o", str(tmp_path / "t.json")]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "gone from" in err and "pass that folder" in err
    # an explicit cache folder is the user's choice
    ev = dtrace.events(a, cache=os.path.join(v, "cache")).compute()
    assert sorted(set(ev.index)) == [0, 1, 2, 3]
    assert main(["timeline", a, "-o", str(tmp_path / "t.json"), "--cache", os.path.join(v, "cache")]) == 0
