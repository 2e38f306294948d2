"""The GPU of every format that describes it (issue 30): rocprofv3's agents and Nsight Systems'
``TARGET_INFO_GPU`` give the ``devices`` table, so those inputs get a roofline too. Each expected
value is read here from the raw file (JSON, SQLite)."""

from __future__ import annotations

import gzip
import json
import shutil
import sqlite3

from testpaths import shared

import dtrace


def test_rocprofv3_agent_names_the_device(tmp_path):
    rocprof = shared("rocprof", "908_results.json.gz")  # skipped where ../shared is absent
    with gzip.open(rocprof, "rt") as f:
        doc = json.load(f)
    agents = [a for a in doc["rocprofiler-sdk-tool"][0]["agents"] if a["type"] == 2]
    res = dtrace.analyze(rocprof, tmp_path / "out", scheduler="sync")
    dev = res.devices.iloc[0]
    agent = next(a for a in agents if a["gpu_index"] == dev["device"])
    v = agent["gfx_target_version"]
    assert dev["name"] == agent["product_name"] == "AMD Instinct MI350X"
    assert (dev["vendor"], dev["capability"], dev["sms"]) == (
        "amd",
        f"{v // 10000}.{(v // 100) % 100}",
        agent["cu_count"],
    )
    assert dev["gpu"] == "AMD Instinct MI350X" and dev["gpu_note"] == ""


def test_nsys_target_info_gpu_names_the_device(tmp_path):
    nsys = shared("nsys", "rtx4060ti_4streams.sqlite")
    with sqlite3.connect(f"file:{nsys}?mode=ro", uri=True) as db:
        name, sms, mem, major, minor = db.execute(
            "select name, smCount, totalMemory, computeMajor, computeMinor from TARGET_INFO_GPU"
        ).fetchone()
    path = tmp_path / "r.sqlite"
    shutil.copy(nsys, path)
    res = dtrace.analyze(str(path), tmp_path / "out", scheduler="sync")
    dev = res.devices.iloc[0]
    assert (dev["name"], dev["sms"], dev["memory_bytes"]) == (name, sms, mem)
    assert dev["capability"] == f"{major}.{minor}" and dev["vendor"] == "nvidia"
    # not in the bundled table: the note says how to add it, not that the trace names no device
    assert dev["gpu"] == "" and "is not in the GPU table" in dev["gpu_note"]
