"""Where a tuned network's time goes: a small network tuned for real, compiled with and without
its database, timed call by call by the relax VM's instrument; finalists timed again before one
is kept (a lucky in-run timing loses to a re-timing); and the bench's bad input."""

import os
import sys
import types

import pytest
import torch

from conftest import BENCH_DIR, bench_module, run_bench, run_cli, tiny_mlp


def network_profile():
    """The bench script as a module (bench/ is no package; its sibling scripts importable)."""
    if BENCH_DIR not in sys.path:
        sys.path.insert(0, BENCH_DIR)
    return bench_module("network_profile.py")


def test_a_tuned_network_timed_kernel_by_kernel(tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from datagen.torch_import import load_exported, relax_module
    from datagen.tvm_env import make_target
    from tuning.tuner import compile_network

    path, x = str(tmp_path / "mlp.pt2"), torch.randn(4, 16)
    torch.export.save(torch.export.export(tiny_mlp(), (x,)), path)
    tuned = tmp_path / "tuned"
    run_cli("run", "--torch-model", path, "--trials", "8", "--trials-per-iter", "4", "--tuner",
            "random", "--out", str(tuned), "--no-progress", prog="tune", check=True)

    bench = network_profile()
    target = make_target(None)
    mod = relax_module(load_exported(path), target)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    (tmp_path / "empty").mkdir()
    databases = {"random": ms.database.JSONDatabase(work_dir=str(tuned)),
                 "untuned": ms.database.JSONDatabase(work_dir=str(tmp_path / "empty"))}
    bests = {t: bench.in_run_bests(db, tasks, target) for t, db in databases.items()}
    assert set(bests["random"]) == {t.task_name for t in tasks} and len(tasks) == 2
    assert all(b is not None and b > 0 for b in bests["random"].values())
    assert all(b is None for b in bests["untuned"].values())

    executables = {t: compile_network(db, mod, target) for t, db in databases.items()}
    rounds = bench.timed_calls(executables, [x.numpy()], target, rounds=3)
    assert [len(r) for r in rounds.values()] == [3, 3]
    for run in rounds["random"]:  # every task's kernel called once per inference, timed
        assert {s: run["calls"][s] for s in bests["random"]} == {s: 1 for s in bests["random"]}
        assert 0 < sum(run["spent_s"].values()) < run["total_s"]

    # the tuned schedules timed alone again, hot and with the caches flushed; none untuned
    again = bench.timed_alone(databases, tasks, target, rounds=1)
    assert sorted(again) == ["cold", "hot"] and again["hot"]["untuned"] == {}
    assert all(again[p]["random"][n] > 0 for p in again for n in bests["random"])

    summary = bench.summarize(rounds, bests, again)
    for name in bests["random"]:
        row = summary["kernels"][name]
        assert row["calls"] == 1 and row["random"]["alone_s"] == bests["random"][name]
        assert row["random"]["cold_s"] == again["cold"]["random"][name]
        assert row["untuned"]["alone_s"] is None and row["untuned"]["in_network_s"] > 0
        assert row["untuned"]["hot_s"] is None
    tuned_totals, untuned_totals = summary["totals"]["random"], summary["totals"]["untuned"]
    assert tuned_totals["untuned_kernels_s"] == 0 < tuned_totals["alone_s"]
    assert untuned_totals["untuned_kernels_s"] == untuned_totals["kernels_s"] > 0
    assert not any(k.startswith(bench.BUILTIN) for k in summary["kernels"])
    for totals in (tuned_totals, untuned_totals):
        assert totals["kernels_s"] + totals["builtins_s"] < totals["inference_s"]
    text = bench.format_profile(summary, ["random", "untuned"], top=5)
    assert all(name in text for name in bests["random"])
    assert "every kernel in the network" in text and "alone again, cold" in text
    assert summary["totals"]["random"]["cold_s"] == pytest.approx(
        sum(again["cold"]["random"].values()))

    # each task's 2 best timed again, the fastest kept: both networks of each tuner measured
    options = types.SimpleNamespace(finalists=2, finalist_rounds=1, rounds=2)
    result = bench.finalists_networks(databases, tasks, mod, [x.numpy()], target, options,
                                      {"random": str(tuned), "untuned": str(tmp_path / "empty")})
    assert sorted(result["latency"]) == ["random", "random+finalists", "untuned",
                                         "untuned+finalists"]
    assert all(len(v) == 2 and min(v) > 0 for v in result["latency"].values())
    choices = result["choices"]["random"]
    assert set(choices) == set(bests["random"]) and result["choices"]["untuned"] == {}
    assert all(c["finalists"] == 2 and c["rank"] in (0, 1) for c in choices.values())
    row = result["tuners"]["random"]
    assert row["changed"] == sum(c["rank"] == 1 for c in choices.values())
    assert row["tasks"] == len(tasks) and row["in_run_us"] > 0 and row["finalists_us"] > 0
    assert result["tuners"]["untuned"]["tasks"] == 0
    assert set(result["paired"]) == {"random/untuned"}
    assert (tuned / "finalists-k2" / "database_tuning_record.json").exists()
    text = bench.format_finalists(result)
    assert "random/untuned:" in text and "tasks changed" in text


class Dense(torch.nn.Module):
    """One 256x256x256 matrix product: the schedules MetaSchedule samples of it differ several
    times in speed, so a re-timing cannot mistake the slowest for the fastest."""

    def __init__(self):
        super().__init__()
        self.fc = torch.nn.Linear(256, 256, bias=False)

    def forward(self, x):
        return self.fc(x)


def test_a_lucky_in_run_best_loses_its_place_when_timed_again(tmp_path):
    from tvm.s_tir import meta_schedule as ms

    from datagen.measure import Measurer, run_latency
    from datagen.torch_import import relax_module
    from datagen.tvm_env import make_target
    from tuning.tuner import SearchInputs, compile_network, tune_network

    remeasure_finalists = network_profile().remeasure_finalists

    target = make_target(None)
    mod = relax_module(torch.export.export(Dense().eval(), (torch.randn(256, 256),)), target)
    (task,) = ms.relax_integration.extract_tasks(mod, target)
    measurer = Measurer(target, None, num_threads=1)  # one thread: a busy neighbour cannot stall it
    try:
        tuned = tune_network(mod, None, target, "random", 8, str(tmp_path / "run"), measurer,
                             SearchInputs(), trials_per_iter=8)
        workload = tuned.commit_workload(task.dispatched[0])
        records = tuned.get_top_k(workload, 8)
        best, slowest = records[0], records[-1]
        # a gap no busy machine's noise can close (the tests run two at a time on two cores)
        assert run_latency(slowest.run_secs) > 3 * run_latency(best.run_secs)
        # the slowest schedule recorded again with a timing no run could have: the in-run best
        lucky = slowest.trace
        tuned.commit_tuning_record(ms.database.TuningRecord(
            lucky, workload, [1e-9] * 5, best.target, best.args_info))
        assert tuned.query_tuning_record(task.dispatched[0], target, task.task_name) \
            .trace.as_json() == lucky.as_json()

        chosen, report = remeasure_finalists({"random": tuned}, [task], target, measurer,
                                              top_k=2, rounds=3,
                                              out={"random": str(tmp_path / "finalists")})
        kept = chosen["random"].query_tuning_record(task.dispatched[0], target, task.task_name)
        assert kept.trace.as_json() == best.trace.as_json()
        assert len(kept.run_secs) == 3 and all(s > 1e-6 for s in kept.run_secs)
        choice = report["random"][task.task_name]
        assert choice["rank"] == 1 and choice["finalists"] == 2
        assert choice["in_run_best_s"] == pytest.approx(1e-9)
        assert choice["median_s"] == pytest.approx(run_latency(kept.run_secs))
        # written to disk: read back, the same single choice
        again = ms.database.JSONDatabase(work_dir=str(tmp_path / "finalists"))
        assert len(again) == 1

        # one finalist: the in-run best is all there is to keep, whatever its re-timing
        chosen, report = remeasure_finalists({"random": tuned}, [task], target, measurer,
                                             top_k=1, rounds=1)
        kept = chosen["random"].query_tuning_record(task.dispatched[0], target, task.task_name)
        assert kept.trace.as_json() == lucky.as_json()
        assert report["random"][task.task_name]["rank"] == 0
    finally:
        measurer.close()
    # the network builds with the choice
    assert compile_network(chosen["random"], mod, target) is not None


@pytest.mark.parametrize("top_k, rounds", [(0, 3), (4, 0)])
def test_finalists_need_one_of_each(top_k, rounds):
    from datagen.errors import UserError

    with pytest.raises(UserError, match="at least 1"):
        network_profile().remeasure_finalists({}, [], None, None, top_k=top_k, rounds=rounds)


@pytest.mark.parametrize("extra, message", [
    ([], "no finished run of bo, ms-xgb-pretrained, ms-default for electra-small seed 0 at 16"),
    (["--rounds", "0"], "--rounds must be at least 1, not 0"),
    (["--alone", "--alone-rounds", "0"], "--alone-rounds must be at least 1, not 0"),
    (["--finalists", "4", "--finalist-rounds", "0"], "--finalist-rounds at least 1, not 4 and 0"),
    (["--finalists", "4", "--alone"], "give one of them"),
    (["--budget", "64", "--reach", "64"], "--reach is ms-default's budget in the race, above "
     "--budget (64), not 64"),
    (["--budget", "64", "--reach", "256"], "no finished run of bo, ms-default@256 for "
     "electra-small seed 0 at 64"),
])
def test_bad_input_of_the_profile_is_one_line(tmp_path, extra, message):
    proc = run_bench("network_profile.py", "electra-small", "--out", str(tmp_path), *extra)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert os.listdir(tmp_path) == []
