"""The tuning benchmark's GPU part refuses what cannot run, with one line, before tuning."""

import os

import pytest

from conftest import needs_no_gpu, run_bench


@pytest.mark.parametrize("args, message", [
    (["--parts", "gpu"], "--parts gpu tunes on a GPU: give its --target"),
    (["--target", "nvidia/nvidia-h100"], "with a GPU --target only --parts gpu runs"),
    pytest.param(["--parts", "gpu", "--target", "nvidia/nvidia-h100"],
                 "needs a cuda device and this host has none", marks=needs_no_gpu),
    (["--jobs", "2"], "--jobs above 1 needs a GPU --target"),
])
def test_gpu_part_without_a_gpu_is_one_line(tmp_path, args, message):
    proc = run_bench("tuning_vs_metaschedule.py", *args, "--out", str(tmp_path))
    assert proc.returncode != 0
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr
    assert not os.listdir(tmp_path)  # nothing tuned, nothing written


@pytest.mark.parametrize("script", ["tuning_vs_metaschedule.py", "collect_vs_tune_tir.py"])
def test_an_out_that_is_a_file_is_one_line_before_any_work(tmp_path, script):
    (tmp_path / "a-file").write_text("x")
    proc = run_bench(script, "--out", str(tmp_path / "a-file" / "sub"))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "a-file is a file, not a folder" in lines[0]
    assert os.listdir(tmp_path) == ["a-file"]


def test_gpu_part_report_needs_no_gpu(tmp_path):
    """The pairs measured on a GPU are summarised anywhere: --report measures nothing, and
    says when the pairs were made with another model than the shipped one (this one, kept
    beside the test, with the GPU model before the warp features)."""
    import shutil

    pairs = os.path.join(os.path.dirname(__file__), "data")
    args = ["--parts", "gpu", "--target", "nvidia/nvidia-h100", "--seeds", "0", "--trials",
            "64", "--tuners", "bo", "ms-xgb-pretrained", "ms-default", "--report", "--out",
            str(tmp_path)]
    empty = run_bench("tuning_vs_metaschedule.py", *args)
    assert empty.returncode != 0 and "no finished (workload, seed) pair" in empty.stderr
    shutil.copytree(pairs, tmp_path / "tuning-gpu" / "pairs")
    proc = run_bench("tuning_vs_metaschedule.py", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "dense/m197_n2304_k768" in proc.stdout and "bo@64 / ms-xgb-pretrained@64" in proc.stdout
    assert "(made with graphsage-h100.ckpt (" in proc.stdout
    assert (tmp_path / "tuning-gpu" / "summary.json").exists()


@pytest.mark.slow
def test_search_time_times_each_tuners_rounds_on_one_and_two_threads():
    # the bench runs in this process, each thread count in a process of its own
    proc = run_bench("search_time.py", "dense/m32_n32_k32", "--target", "llvm", "--tuners",
                     "bo", "ms-default", "--rounds", "2")
    assert proc.returncode == 0, proc.stderr[-3000:]
    rounds = [line for line in proc.stdout.splitlines() if "round" in line and "wall" in line]
    assert len(rounds) == 8  # 2 tuners x 2 thread counts x 2 rounds
    assert all("8 candidates" in line for line in rounds)
    assert sum(line.startswith(("bo ", "ms-default ")) and "serial about" in line
               for line in proc.stdout.splitlines()) == 2


def test_search_time_refuses_an_unknown_tuner_in_one_line():
    proc = run_bench("search_time.py", "--tuners", "nope")
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "unknown tuner 'nope'" in lines[0]
