"""bench/two_speeds.py: a tuning run's finalists timed interleaved, per thread count, and what
the summary says of programs that switch together (its real run: bench/results/ood/two-speeds)."""

import json
import os

import numpy as np
import pytest
from conftest import assert_clean_error, bench_module, run_bench

KEY = "dense/m32_n64_k64"


def test_programs_that_step_together_correlate_and_a_flat_one_does_not():
    describe = bench_module("two_speeds.py").describe
    step = [100.0] * 10 + [140.0] * 10 + [100.0] * 10
    samples = [[t, a, a * 0.5 + (t % 2) * 0.01, 50.0 + (t % 3) * 0.01]
               for t, a in enumerate(step)]
    out = describe({"programs": ["a", "b", "flat"], "samples": samples})
    assert out["a"]["p10_us"] == 100.0 and out["a"]["p90_us"] == 140.0
    assert out["a"]["p90_over_p10"] == pytest.approx(1.4)
    assert out["a"]["correlation"][1] > 0.99  # b steps with a
    assert abs(out["a"]["correlation"][2]) < 0.2 and out["flat"]["p90_over_p10"] < 1.01


def _run_folder(root) -> str:
    """A `tune compare` folder holding one run: a MetaSchedule database with one measured
    schedule of KEY, as `tune` writes it."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from datagen.sampler import ScheduleSampler
    from datagen.tvm_env import make_target
    from datagen.workloads import from_key

    target, workload = make_target(None), from_key(KEY)
    work_dir = os.path.join(root, "runs", KEY.replace("/", "__"), "bo", "seed0")
    os.makedirs(work_dir)
    db = ms.database.JSONDatabase(work_dir=work_dir)
    (cand,) = ScheduleSampler(workload.mod, target).random(1, seed=0, seen=set())
    db.commit_tuning_record(ms.database.TuningRecord(
        cand.sch.trace, db.commit_workload(workload.mod), [2e-5] * 3, target,
        ArgInfo.from_prim_func(workload.mod["main"])))
    return str(root)


def test_a_run_folder_is_timed_and_summarised(tmp_path):
    run = _run_folder(tmp_path / "compare")
    out = tmp_path / "out"
    proc = run_bench("two_speeds.py", "--run", run, "--kernels", KEY, "--tuners", "bo",
                     "--threads", "1", "--seconds", "1", "--out", str(out), isolated=True)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    row = summary["threads"]["1"]["per_program"][f"{KEY}:bo"]
    assert 0 < row["p10_us"] <= row["p90_us"] < 1e5 and row["p90_over_p10"] >= 1
    timeline = json.loads((out / "threads-1.json").read_text())
    assert len(timeline["samples"]) == summary["threads"]["1"]["samples"] >= 1
    assert np.all(np.diff([s[0] for s in timeline["samples"]]) > 0)
    assert (out / "timeline.png").stat().st_size > 0


def test_a_tuner_with_no_run_is_one_line(tmp_path):
    run = _run_folder(tmp_path / "compare")
    proc = run_bench("two_speeds.py", "--run", run, "--kernels", KEY, "--tuners", "ms-default",
                     "--threads", "1", "--seconds", "1", "--out", str(tmp_path / "out"),
                     isolated=True)
    assert_clean_error(proc, "no measured trial to time", prog="two_speeds")
    assert not (tmp_path / "out" / "summary.json").exists()
    (tmp_path / "file").write_text("")
    proc = run_bench("two_speeds.py", "--run", run, "--kernels", KEY, "--out",
                     str(tmp_path / "file" / "out"))
    assert_clean_error(proc, "is a file, not a folder", prog="two_speeds")
