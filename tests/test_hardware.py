"""The GPU table: every accelerator the issue names is there with sources, devices of the shared
traces match the right entry, and user spec files (dtrace's format or TraceLens's) override it."""

from __future__ import annotations

import json
import os

import pytest
from testpaths import ROOT

from dtrace.errors import UsageError
from dtrace.knowledge.hardware import load_specs, match_device, read_spec_file

GIB = 2**30


def test_bundled_table_covers_the_accelerators_people_train_on():
    names = " | ".join(s.gpu for s in load_specs())
    for gpu in ("A100", "H100 SXM", "H100 PCIe", "H200", "B200", "GB200", "MI250X", "MI300X", "MI325X", "MI355X"):
        assert gpu in names, gpu
    for s in load_specs():
        assert s.source and s.hbm_tbps and s.hbm_tbps > 0, s.gpu
        assert s.peak("matrix", "bf16") or s.peak("matrix", "fp16"), s.gpu
        assert s.peak("vector", "fp32"), s.gpu


@pytest.mark.parametrize(
    "name,kw,want",
    [
        # deviceProperties of the shared traces and of tests/data/h200
        ("NVIDIA H100 80GB HBM3", {"memory_bytes": 85018279936, "capability": "9.0"}, "NVIDIA H100 SXM5"),
        ("NVIDIA H200", {"memory_bytes": 150109880320, "capability": "9.0"}, "NVIDIA H200 SXM"),
        ("NVIDIA B200", {"memory_bytes": 191503138816}, "NVIDIA B200"),
        ("NVIDIA A100-SXM4-80GB", {"memory_bytes": 84990623744}, "NVIDIA A100 SXM4 80GB"),
        ("NVIDIA A100-PG509-200", {"memory_bytes": 42297524224}, "NVIDIA A100 SXM4 40GB"),
        ("NVIDIA A100 80GB PCIe", {"memory_bytes": 85 * GIB}, "NVIDIA A100 PCIe 80GB"),
        ("NVIDIA H100 PCIe", {}, "NVIDIA H100 PCIe"),
        ("NVIDIA GB200", {}, "NVIDIA GB200 (one Blackwell GPU)"),
        ("AMD Instinct MI300X", {"vendor": "amd", "capability": "9.4", "sms": 304}, "AMD Instinct MI300X"),
        ("AMD Instinct MI355X", {"vendor": "amd"}, "AMD Instinct MI355X"),
        (
            "AMD Instinct MI210",
            {"vendor": "amd", "capability": "9.0", "sms": 104},
            "AMD Instinct MI210 / MI250 (one GCD)",
        ),
        (
            "AMD Radeon Graphics",
            {"vendor": "amd", "capability": "9.0", "sms": 104},
            "AMD Instinct MI210 / MI250 (one GCD)",
        ),
    ],
)
def test_devices_match(name, kw, want):
    assert match_device(load_specs(), name, **kw).gpu == want


def test_unknown_devices_match_nothing():
    assert match_device(load_specs(), "NVIDIA GeForce RTX 4060 Ti") is None
    assert match_device(load_specs(), "") is None
    assert match_device(load_specs(), "NVIDIA GH200 480GB") is None  # not an H200


def test_peaks_fall_back_for_vector_half_precision_and_fp32_matrices():
    mi300 = match_device(load_specs(), "AMD Instinct MI300X")
    assert mi300.peak("matrix", "bf16") == 1307.4 and mi300.hbm_tbps == 5.3
    assert mi300.peak("vector", "bf16") == 163.4  # no vector bf16 figure: the vector fp32 peak
    a100 = match_device(load_specs(), "NVIDIA A100-SXM4-80GB", memory_bytes=80 * GIB)
    assert a100.peak("matrix", "fp32") == 19.5 and a100.peak("matrix", "tf32") == 156
    assert a100.peak("matrix", "fp8") is None and a100.peak("vector", "int64") is None


def test_user_spec_file_overrides_with_measured_figures(tmp_path):
    # the "max achievable" figures measured on the H200 that recorded tests/data/h200
    with open(os.path.join(ROOT, "tests", "data", "h200", "hw.json")) as f:
        hw = json.load(f)
    spec = {
        "gpus": [
            {
                "gpu": "H200 (measured)",
                "match": {"name": "H200"},
                "hbm_tbps": hw["copy_d2d_bytes_per_s"] / 1e12,
                "matrix_tflops": {
                    "bf16": hw["matrix_bf16_tflops"] if "matrix_bf16_tflops" in hw else hw["matmul_bf16_tflops"]
                },
                "source": "tests/data/h200/hw.json",
            }
        ]
    }
    path = tmp_path / "h200.json"
    path.write_text(json.dumps(spec))
    specs = load_specs(str(path))
    s = match_device(specs, "NVIDIA H200")
    assert s.gpu == "H200 (measured)" and s.origin == str(path)
    assert s.peak("matrix", "bf16") == pytest.approx(786.786, abs=1e-3) and s.hbm_tbps == pytest.approx(
        4.2256, abs=1e-4
    )
    assert match_device(specs, "NVIDIA H100 80GB HBM3").gpu == "NVIDIA H100 SXM5"  # the rest: bundled


def test_tracelens_arch_file(tmp_path):
    # TraceLens's bundled MI300X spec (its "max achievable" figures, peer_numbers.md)
    arch = {
        "name": "MI300X",
        "mem_bw_gbps": 5300,
        "max_achievable_tflops": {
            "matrix_bf16": 708,
            "matrix_fp16": 654,
            "matrix_fp8": 1273,
            "matrix_fp32": 163,
            "vector_bf16": 163,
            "vector_fp32": 81,
        },
    }
    path = tmp_path / "mi300x.json"
    path.write_text(json.dumps(arch))
    [s] = read_spec_file(str(path))
    assert s.hbm_tbps == 5.3 and s.peak("matrix", "bf16") == 708 and s.peak("vector", "bf16") == 163
    assert match_device(load_specs(str(path)), "anything").gpu == "MI300X"  # no match: every device


def test_bad_spec_files_are_one_line_usage_errors(tmp_path):
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    with pytest.raises(UsageError, match="bad.json: not JSON"):
        load_specs(str(bad))
    with pytest.raises(UsageError, match="missing.json"):
        load_specs(str(tmp_path / "missing.json"))
    bad.write_text(json.dumps({"gpus": [{"gpu": "x", "match": {"name": "("}}]}))
    with pytest.raises(UsageError, match="bad name regex"):
        load_specs(str(bad))
    bad.write_text(json.dumps({"gpus": [{"hbm_tbps": 1}]}))
    with pytest.raises(UsageError, match="expected 'gpu'"):
        load_specs(str(bad))


@pytest.mark.parametrize(
    "doc, says",
    [
        ({"gpus": [{"gpu": "x", "hbm_tbps": -3.0}]}, "hbm_tbps must be a positive number"),
        ({"gpus": [{"gpu": "x", "hbm_tbps": 0}]}, "hbm_tbps must be a positive number"),
        ({"gpus": [{"gpu": "x", "matrix_tflops": {"bf16": 1e999}}]}, "matrix_tflops.bf16 must be a positive number"),
        ({"gpus": [{"gpu": "x", "vector_tflops": {"fp32": -1}}]}, "vector_tflops.fp32 must be a positive number"),
        ({"mem_bw_gbps": None, "max_achievable_tflops": {"matrix_bf16": None}}, "expected 'max_achievable_tflops'"),
        ({"mem_bw_gbps": -5300, "max_achievable_tflops": {"matrix_bf16": 708}}, "hbm_tbps must be a positive"),
    ],
)
def test_peaks_must_be_finite_and_positive(tmp_path, doc, says):
    """Issue 31: negative and infinite peaks were accepted ("at -3.9 % of the roofline", then an
    OverflowError in the report); a TraceLens arch file with null raised TypeError."""
    path = tmp_path / "spec.json"
    path.write_text(json.dumps(doc).replace("Infinity", "1e999"))
    with pytest.raises(UsageError, match=says):
        load_specs(str(path))


def test_spec_files_that_are_not_files_are_refused_without_reading(tmp_path):
    """A FIFO blocked for ever and /dev/urandom was read until memory ran out (issue 31)."""
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path in (str(fifo), "/dev/urandom", "/dev/zero"):
        with pytest.raises(UsageError, match="not a regular file"):
            read_spec_file(path)
    deep = tmp_path / "deep.json"
    deep.write_text("[" * 200_000 + "]" * 200_000)
    with pytest.raises(UsageError, match="--gpu-spec"):
        read_spec_file(str(deep))
