"""The results folder is shared and hand-edited: nothing outside OUT is read or deleted because a
manifest says so, crashed writes leave nothing behind, links are never written through (issue 13)."""

import json
import os
import time

import pandas as pd
import pytest

from dtrace.cli.main import main
from dtrace.errors import ResultsError
from dtrace.results import MANIFEST, clean_staging, load, write_results

try:
    import fcntl
except ImportError:  # pragma: no cover
    fcntl = None

from test_bad_input import GOOD, write


def small(n=2):
    return pd.DataFrame(
        {"rank": list(range(n)), "device": list(range(n)), "total_ns": [10 * (i + 1) for i in range(n)]}
    )


def edit_manifest(out, **fields):
    path = os.path.join(out, MANIFEST)
    with open(path) as f:
        m = json.load(f)
    m.update(fields)
    with open(path, "w") as f:
        json.dump(m, f)
    return m


def test_stale_cleanup_never_leaves_out(tmp_path):
    """An old manifest listing ../../x/precious or /abs/precious2 must not delete those files."""
    out = tmp_path / "a" / "b" / "out"
    write_results(str(out), {"breakdown": small(), "old_table": small()}, {"inputs": []})
    outside = tmp_path / "x"
    outside.mkdir()
    precious = outside / "precious.parquet"
    precious.write_bytes(b"keep me")
    precious2 = tmp_path / "precious2.parquet"
    precious2.write_bytes(b"keep me too")
    (out / "notes.parquet").write_bytes(b"not a dtrace table")
    m = edit_manifest(
        str(out), tables=["breakdown", "old_table", "../../../x/precious", str(tmp_path / "precious2"), "notes"]
    )
    write_results(str(out), {"breakdown": small(3)}, {"inputs": []})
    assert precious.read_bytes() == b"keep me" and precious2.read_bytes() == b"keep me too"
    assert (out / "notes.parquet").read_bytes() == b"not a dtrace table"  # listed, but not of that run
    assert not (out / "old_table.parquet").exists()  # the real stale table is gone
    assert m["run_id"] != load(str(out)).manifest["run_id"]
    assert load(str(out)).table_names == ["breakdown"]


def test_stale_cleanup_through_analyze(tmp_path):
    trace = write(tmp_path / "rank-0.json", GOOD)
    out = tmp_path / "out"
    assert main(["analyze", trace, "-o", str(out), "--sync"]) == 0
    victim = tmp_path / "victim.parquet"
    victim.write_bytes(b"data")
    m = json.loads((out / MANIFEST).read_text())
    edit_manifest(str(out), tables=m["tables"] + ["../victim", str(tmp_path / "victim")])
    assert main(["analyze", trace, "-o", str(out), "--sync"]) == 0
    assert victim.read_bytes() == b"data"


@pytest.mark.parametrize("name", ["../../x/precious", "/etc/passwd", "a/b", "", "x.y", 7])
def test_table_names_from_a_manifest_are_checked(tmp_path, name, capsys):
    out = tmp_path / "out"
    write_results(str(out), {"breakdown": small()}, {"inputs": []})
    edit_manifest(str(out), tables=["breakdown", name])
    with pytest.raises(ResultsError, match="invalid table name"):
        load(str(out)).table(name)
    assert main(["report", str(out), "-o", str(tmp_path / "r.html")]) == 2
    err = capsys.readouterr().err
    assert "invalid table name" in err and err.count("\n") == 1


def test_table_file_linking_out_of_out_is_not_read(tmp_path):
    out = tmp_path / "out"
    write_results(str(out), {"breakdown": small(), "kernels": small()}, {"inputs": []})
    elsewhere = tmp_path / "elsewhere.parquet"
    os.replace(out / "kernels.parquet", elsewhere)
    os.symlink(elsewhere, out / "kernels.parquet")
    with pytest.raises(ResultsError, match="outside the results directory"):
        load(str(out)).table("kernels")
    inside = out / "sub"
    inside.mkdir()
    os.replace(out / "breakdown.parquet", inside / "b.parquet")
    os.symlink(os.path.join("sub", "b.parquet"), out / "breakdown.parquet")  # a link inside OUT is fine
    assert load(str(out)).table("breakdown")["total_ns"].tolist() == [10, 20]


def test_manifest_linking_out_of_out_is_not_read(tmp_path):
    out = tmp_path / "out"
    write_results(str(out), {"breakdown": small()}, {"inputs": []})
    os.replace(out / MANIFEST, tmp_path / "m.json")
    os.symlink(tmp_path / "m.json", out / MANIFEST)
    with pytest.raises(ResultsError, match="outside the results directory"):
        load(str(out))


def test_links_are_replaced_not_written_through(tmp_path):
    out = tmp_path / "out"
    write_results(str(out), {"breakdown": small()}, {"inputs": []})
    victim = tmp_path / "victim"
    victim.write_bytes(b"original")
    victim_m = tmp_path / "victim.json"
    victim_m.write_text("{}")
    os.unlink(out / "breakdown.parquet")
    os.symlink(victim, out / "breakdown.parquet")
    os.unlink(out / MANIFEST)
    os.symlink(victim_m, out / MANIFEST)
    write_results(str(out), {"breakdown": small(3)}, {"inputs": []})
    assert victim.read_bytes() == b"original" and victim_m.read_text() == "{}"
    assert not os.path.islink(out / "breakdown.parquet") and not os.path.islink(out / MANIFEST)
    assert load(str(out)).breakdown["total_ns"].tolist() == [10, 20, 30]


def test_crashed_staging_folders_are_cleaned(tmp_path, monkeypatch):
    out = tmp_path / "out"
    write_results(str(out), {"breakdown": small()}, {"inputs": []})
    crashed = out / ".staging-crashed"  # a crashed run: its lock file is free
    crashed.mkdir()
    (crashed / ".lock").write_text("")
    (crashed / "breakdown.parquet").write_bytes(b"half")
    legacy = out / ".staging-legacy"  # an older dtrace's, no lock, long ago
    legacy.mkdir()
    (legacy / "x.parquet").write_bytes(b"half")
    old = time.time() - 7200
    os.utime(legacy, (old, old))
    fresh = out / ".staging-starting"  # no lock yet, just created: may be a run starting
    fresh.mkdir()
    link = out / ".staging-link"
    target = tmp_path / "keep"
    target.mkdir()
    (target / "f").write_text("x")
    os.symlink(target, link)
    notes = out / ".staging-notes.txt"  # a user's file and folder named like staging (issue 31)
    notes.write_text("mine")
    thesis = out / ".staging-thesis"
    thesis.mkdir()
    (thesis / "chapter1.tex").write_text("mine")
    os.utime(thesis, (old - 7 * 86400, old - 7 * 86400))
    live = out / ".staging-live"  # a live run holds its lock
    live.mkdir()
    (live / ".lock").write_text("")
    held = os.open(live / ".lock", os.O_RDWR)
    try:
        if fcntl is not None:
            fcntl.flock(held, fcntl.LOCK_EX)
        write_results(str(out), {"breakdown": small(3)}, {"inputs": []})
        left = sorted(n for n in os.listdir(out) if n.startswith(".staging-"))
        mine = [".staging-link", ".staging-notes.txt", ".staging-thesis"]  # not dtrace's: left alone
        assert left == sorted(
            mine + ([".staging-live", ".staging-starting"] if fcntl is not None else [".staging-starting"])
        )
        assert (target / "f").read_text() == "x"  # the link was not followed
        assert notes.read_text() == "mine" and (thesis / "chapter1.tex").read_text() == "mine"
    finally:
        os.close(held)
    assert clean_staging(str(out)) == [".staging-live"] if fcntl is not None else True


def test_staged_tables_are_those_committed(tmp_path):
    """Tables staged before the reduce: a table replaced since is written as committed, one
    dropped since is not written, and the fingerprints are those of the files."""
    import xxhash

    from dtrace.results import StagedResults

    out = tmp_path / "out"
    keep, replaced, dropped = small(2), small(3), small(4)
    with StagedResults(str(out)) as staged:
        staged.stage({"breakdown": keep, "kernels": replaced, "dropped": dropped})
        assert not (out / MANIFEST).exists()  # nothing in place before the commit
        res = staged.commit({"breakdown": keep, "kernels": small(5)}, {"inputs": []})
    assert sorted(os.listdir(out)) == ["breakdown.parquet", "kernels.parquet", MANIFEST]
    back = load(str(out))
    assert back.table_names == ["breakdown", "kernels"] and res.manifest["run_id"] == back.manifest["run_id"]
    pd.testing.assert_frame_equal(back.breakdown, small(2))
    pd.testing.assert_frame_equal(back.kernels, small(5))  # the replacement, not what was staged first
    for name in ("breakdown", "kernels"):
        data = (out / f"{name}.parquet").read_bytes()
        assert back.manifest["table_fingerprints"][name] == xxhash.xxh3_128_hexdigest(data)


def test_staged_results_given_up_change_nothing(tmp_path):
    """Leaving the staging without a commit (a reducer failed) keeps the previous results and
    leaves no staging folder; a manifest that names its own run tags every table with it."""
    from dtrace.results import StagedResults

    out = tmp_path / "out"
    write_results(str(out), {"breakdown": small()}, {"inputs": []})
    before = {n: (out / n).read_bytes() for n in os.listdir(out)}
    with pytest.raises(RuntimeError, match="a reducer failed"):
        with StagedResults(str(out)) as staged:
            staged.stage({"breakdown": small(3), "kernels": small(3)})
            raise RuntimeError("a reducer failed")
    assert {n: (out / n).read_bytes() for n in os.listdir(out)} == before
    bd = small(3)
    with StagedResults(str(out)) as staged:
        staged.stage({"breakdown": bd})  # tagged with the staging's own run id at first
        staged.commit({"breakdown": bd}, {"inputs": [], "run_id": "myrun"})
    assert load(str(out)).manifest["run_id"] == "myrun"
    pd.testing.assert_frame_equal(load(str(out)).breakdown, small(3))  # read back: tagged with myrun


def test_a_huge_sparse_manifest_is_refused_unread(tmp_path, capsys):
    """Issue 31: a 4 GB sparse OUT/manifest.json was read whole (MemoryError); every file dtrace
    reads is size-bound, and this one is refused in one line before a byte is read."""
    from dtrace.cli.main import main

    out = tmp_path / "out"
    write_results(str(out), {"breakdown": small()}, {"inputs": []})
    with open(out / MANIFEST, "wb") as f:
        f.truncate(4 << 30)
    assert main(["show", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot read the manifest" in err and "is larger than" in err and len(err.strip().splitlines()) == 1


def test_a_run_with_nothing_analysable_writes_nothing(tmp_path, capsys):
    """Every input failed: exit 2 and no "results:" line; a folder the run would have made does not
    exist afterwards; the previous results in an existing OUT (tables, manifest and the stored
    per-part results in its cache) are as they were (issue 31, item 12)."""
    bad = write(tmp_path / "rank-1.json", b"{not json")
    fresh = tmp_path / "fresh"
    assert main(["analyze", bad, "-o", str(fresh), "--sync", "--no-progress"]) == 2
    out = capsys.readouterr().out
    assert "results:" not in out and f"no results written to {fresh}" in out and f"{bad}:" in out
    assert not fresh.exists()

    kept = tmp_path / "kept"
    good = write(tmp_path / "rank-0.json", GOOD)
    assert main(["analyze", good, "-o", str(kept), "--sync", "--no-progress"]) == 0
    before = {p.relative_to(kept): p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    assert main(["analyze", bad, "-o", str(kept), "--sync", "--no-progress"]) == 2
    after = {p.relative_to(kept): p.read_bytes() for p in kept.rglob("*") if p.is_file()}
    assert {k: v for k, v in after.items() if k in before} == before
    assert load(str(kept)).manifest["inputs"][0]["path"] == good
