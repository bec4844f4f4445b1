"""bench/cross_gpu.py: two GPUs' labels of the same schedules, joined and compared (the
committed H100 dataset and the H200's measurements of its held-out workloads); two datasets of
one device, or with no schedule in common, are refused in one line."""

import os

import pytest

from conftest import BENCH_DIR, bench_module, run_bench
from datagen.errors import UserError

ROOT = os.path.dirname(BENCH_DIR)
H100, H200 = os.path.join(ROOT, "data", "cuda-h100"), os.path.join(ROOT, "data", "cuda-h200")


def load():
    return bench_module("cross_gpu.py")


def test_the_same_schedules_are_joined_across_gpus():
    cross_gpu = load()

    frame = cross_gpu.joined(H200, H100)
    assert frame.trace_hash.is_unique and frame.workload_key.nunique() == 11
    assert (frame.latency_median > 0).all() and (frame.reference_latency > 0).all()
    found = cross_gpu.agreement(frame)
    # the same programs on two Hopper GPUs: ranked alike, far from at random
    assert found["reference_ranks_device"]["kendall_tau"] > 0.5
    assert 0.5 < found["latency_ratio_geomean"] < 2


def test_one_device_or_nothing_in_common_is_one_line(tmp_path):
    cross_gpu = load()

    with pytest.raises(UserError, match="hold records of one device"):
        cross_gpu.joined(H200, H200)
    cpu = os.path.join(ROOT, "data", "llvm-full")
    with pytest.raises(UserError, match="no measured schedule in common"):
        cross_gpu.joined(H200, cpu)
    proc = run_bench("cross_gpu.py", "--dataset", H200, "--reference", H200,
                     "--out", str(tmp_path / "out"))
    assert proc.returncode == 1 and "hold records of one device" in proc.stderr
    assert "Traceback" not in proc.stderr
