"""Slow-GPU signal (e): generated 16- and 64-rank jobs whose traces record op shapes, one GPU's
GEMMs slower at equal shapes (``--fault gpu:rank=R:slow=X``), and fault-free ones."""

import re

import pytest
from _synthjobs import NEED, per_rank_tables

from dtrace.cli.main import main as cli
from dtrace.generate import synth
from dtrace.options import Options
from dtrace.reduce import ORDER

SMALL = dict(steps=3, kernels_per_step=30)
MINE = ("op_perf", "collectives", "ranks", "stragglers")

# name -> (ranks, seed, faults). Offline sweep (seeds 21-23, 2 % kernel jitter): at 16 ranks a
# 5 % slower GPU is flagged with signal e in 3/3, 3 % in 2/3, 2 % never; at 64 ranks 5 % in 3/3,
# 3 % in 2/3. Fault-free jobs: the largest gpu_slowdown of any rank 1.009 (16 ranks) and 1.018
# (64 ranks), nothing flagged. The tests pin the 5 % point.
JOBS = {
    "slow16": (16, 21, ["gpu:rank=5:slow=0.05"]),
    "slow64": (64, 21, ["gpu:rank=21:slow=0.05"]),
    "none16": (16, 22, []),
    "none64": (64, 23, []),
}


@pytest.fixture(scope="module")
def jobs(tmp_path_factory):
    cache: dict[str, tuple[dict, dict]] = {}

    def get(name: str):
        if name not in cache:
            ranks, seed, faults = JOBS[name]
            d = str(tmp_path_factory.mktemp(name))
            truth = synth.generate(d, ranks=ranks, seed=seed, faults=faults, record_shapes=True, **SMALL)
            t = per_rank_tables(d, Options(), NEED | {"op_perf", "devices"})
            for r in ORDER:
                if r.name in MINE:
                    t.update(r.func(t, Options()))
            cache[name] = (truth, t)
        return cache[name]

    return get


@pytest.mark.parametrize("name", ["slow16", "slow64"])
def test_slow_gpu_found(jobs, name):
    truth, t = jobs(name)
    (rank,) = truth["stragglers"]
    s = t["stragglers"].set_index("rank")
    assert s.index[s["flagged"]].tolist() == [rank]
    assert "e" in s.at[rank, "signals"].split(",")
    assert 1.03 <= s.at[rank, "gpu_slowdown"] < 1.08
    g = t["gpu_slowness"].sort_values("gpu_slowdown", ascending=False)
    assert g["rank"].iloc[0] == rank
    top = g.iloc[0]
    assert top["slower_share"] == 1.0 and top["gpu_slowdown_z"] > 3.5
    # the evidence names the op and shapes where the most time was lost
    assert top["worst_op"].startswith(("aten::mm [[8192,4096]", "aten::addmm [[2688]"))
    ev = s.at[rank, "evidence"]
    assert "its GPU runs the modelled ops 1.0" in ev and "check its clocks, power and thermals" in ev
    # the other ranks: no signal e anywhere
    others = s.drop(index=rank)
    assert not others["signals"].str.contains("e").any()
    assert (t["gpu_slowness"].set_index("rank").drop(index=rank)["gpu_slowdown"] < 1.02).all()


@pytest.mark.parametrize("name", ["none16", "none64"])
def test_no_false_flags_without_faults(jobs, name):
    truth, t = jobs(name)
    assert truth["stragglers"] == []
    s = t["stragglers"]
    assert not s["flagged"].any()
    assert not s["signals"].str.contains("e").any()
    g = t["gpu_slowness"]
    assert len(g) == JOBS[name][0] and (g["shapes"] > 0).all()
    assert g["gpu_slowdown"].max() < 1.02


def test_gpu_signal_absent_without_shapes(tmp_path):
    """Without record_shapes nothing is modelled: signal e stays neutral (slowdown 1, z 0)."""
    d = str(tmp_path / "job")
    synth.generate(d, ranks=16, seed=21, **SMALL)
    t = per_rank_tables(d, Options(), NEED | {"op_perf", "devices"})
    for r in ORDER:
        if r.name in MINE:
            t.update(r.func(t, Options()))
    g = t["gpu_slowness"]
    assert (g["shapes"] == 0).all() and (g["gpu_slowdown"] == 1.0).all()
    s = t["stragglers"]
    assert (s["gpu_slowdown"] == 1.0).all() and (s["gpu_slowdown_z"] == 0.0).all()


def test_cli_synth_gpu_fault_end_to_end(tmp_path, capsys):
    """The full path: ``dtrace synth --fault gpu:...``, ``dtrace analyze``, the summary legend."""
    job, out = str(tmp_path / "job"), str(tmp_path / "out")
    assert cli(["synth", job, "--ranks", "16", "--steps", "3", "--kernels-per-step", "30",
                "--seed", "21", "--fault", "gpu:rank=5:slow=0.05"]) == 0  # fmt: skip
    assert cli(["analyze", job, "-o", out]) == 0
    text = capsys.readouterr().out
    assert "rank 5 (device 5" in text and re.search(r"signals [a-z,]*e\b", text) and "cause gpu_slow" in text
    assert "e = slow GPU: its modelled ops run slower than the median rank" in text
