"""bench/surrogate_replay.py: bo's surrogates replayed on a run folder's measured schedules (its
real run: bench/results/ood/surrogate-replay)."""

import json
import os

import numpy as np
import pytest
from conftest import assert_clean_error, bench_module, run_bench

KEY = "dense/m32_n64_k64"


def test_a_perfect_ranking_scores_one_and_a_reversed_one_the_spread():
    rank_scores = bench_module("surrogate_replay.py").rank_scores
    y = np.log(np.linspace(1.0, 3.0, 40))
    assert rank_scores(y, y) == pytest.approx((1.0, 1.0, 1.0))
    first, best16, tau = rank_scores(y, -y)
    assert first == pytest.approx(3.0) and tau == -1.0
    assert best16 == pytest.approx(np.exp(y[24] - y[0]))  # the best of the 16 slowest


def _run_folder(root, schedules: int = 24) -> str:
    """A `tune compare` folder with one run of KEY: `schedules` real schedules, each given a
    latency (seconds) that grows with its index."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    from datagen.sampler import ScheduleSampler
    from datagen.tvm_env import make_target
    from datagen.workloads import from_key

    target, workload = make_target(None), from_key(KEY)
    work_dir = os.path.join(root, "runs", KEY.replace("/", "__"), "bo", "seed0")
    os.makedirs(work_dir)
    db = ms.database.JSONDatabase(work_dir=work_dir)
    wl = db.commit_workload(workload.mod)
    cands = ScheduleSampler(workload.mod, target).random(schedules, seed=0, seen=set())
    for i, cand in enumerate(cands):
        db.commit_tuning_record(ms.database.TuningRecord(
            cand.sch.trace, wl, [1e-5 * (1 + i)] * 3, target,
            ArgInfo.from_prim_func(workload.mod["main"])))
    return str(root)


def test_a_run_folder_is_replayed_and_summarised(tmp_path, tiny_checkpoint):
    run = _run_folder(tmp_path / "compare")
    out = tmp_path / "out"
    proc = run_bench("surrogate_replay.py", "--run", run, "--checkpoint", tiny_checkpoint,
                     "--measured", "4", "--repeats", "3", "--out", str(out), isolated=True)
    assert proc.returncode == 0, proc.stderr
    summary = json.loads((out / "summary.json").read_text())
    per = summary["workloads"][KEY.replace("/", "__")]
    assert per["schedules"] == 24
    # no tree companion beside this checkpoint: nothing to train on for `continued`
    assert set(per["4"]) == {"prior", "prior+gp", "mixture+gp"}
    for first, best16, tau in per["4"].values():
        assert first >= best16 >= 1.0 and -1.0 <= tau <= 1.0
    assert set(summary["geomean"]["4"]) == {"prior", "prior+gp", "mixture+gp"}


def test_a_folder_without_runs_is_one_clear_line(tmp_path, tiny_checkpoint):
    proc = run_bench("surrogate_replay.py", "--run", str(tmp_path), "--checkpoint",
                     tiny_checkpoint, "--out", str(tmp_path / "out"), isolated=True)
    assert_clean_error(proc, "no workload with more than 16 measured schedules",
                       prog="surrogate_replay")
