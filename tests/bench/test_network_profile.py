"""Where a tuned network's time goes: a small network tuned for real, compiled with and without
its database, timed call by call by the relax VM's instrument; and the bench's bad input."""

import os
import sys

import pytest

from conftest import BENCH_DIR, run_bench, run_cli


def network_profile():
    """The bench script as a module (bench/ is no package; its sibling scripts importable)."""
    import importlib.util

    if BENCH_DIR not in sys.path:
        sys.path.insert(0, BENCH_DIR)
    spec = importlib.util.spec_from_file_location(
        "network_profile", os.path.join(BENCH_DIR, "network_profile.py"))
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_a_tuned_network_timed_kernel_by_kernel(tmp_path):
    import torch
    from tvm.s_tir import meta_schedule as ms

    from datagen.torch_import import load_exported, relax_module
    from datagen.tvm_env import make_target
    from tuning.tuner import compile_network

    class Mlp(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.fc1, self.fc2 = torch.nn.Linear(16, 32), torch.nn.Linear(32, 8)

        def forward(self, x):
            return self.fc2(torch.relu(self.fc1(x)))

    path, x = str(tmp_path / "mlp.pt2"), torch.randn(4, 16)
    torch.export.save(torch.export.export(Mlp().eval(), (x,)), path)
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


@pytest.mark.parametrize("extra, message", [
    ([], "no finished run of bo, ms-xgb-pretrained, ms-default for electra-small seed 0 at 16"),
    (["--rounds", "0"], "--rounds must be at least 1, not 0"),
    (["--alone", "--alone-rounds", "0"], "--alone-rounds must be at least 1, not 0"),
])
def test_bad_input_of_the_profile_is_one_line(tmp_path, extra, message):
    proc = run_bench("network_profile.py", "electra-small", "--out", str(tmp_path), *extra)
    assert proc.returncode == 2 and message in proc.stderr and "Traceback" not in proc.stderr
    assert os.listdir(tmp_path) == []
