"""The heavy-task bench: which tasks it picks, its summary of finished rows (made here, not
tuned), and its bad input."""

import json
import os

import pytest

from conftest import bench_module, run_bench


def test_the_heaviest_tasks_come_first():
    import torch
    from tvm.s_tir.analysis import estimate_tir_flops
    from tvm.s_tir import meta_schedule as ms

    from datagen.torch_import import relax_module
    from datagen.tvm_env import make_target

    bench = bench_module("heavy_tasks.py")
    target = make_target(None)
    model = torch.nn.Sequential(torch.nn.Linear(16, 64), torch.nn.ReLU(),
                                torch.nn.Linear(64, 256), torch.nn.ReLU(),
                                torch.nn.Linear(256, 8)).eval()
    with torch.no_grad():
        mod = relax_module(torch.export.export(model, (torch.randn(4, 16),)), target)
    every = ms.relax_integration.extract_tasks(mod, target)

    def cost(task):
        return float(estimate_tir_flops(task.dispatched[0])) * task.weight

    picked = bench.heaviest(mod, target, 2)
    assert len(picked) == 2 < len(every)
    assert [cost(t) for t in picked] == sorted((cost(t) for t in every), reverse=True)[:2]


def test_the_summary_of_finished_rows(tmp_path, capsys):
    bench = bench_module("heavy_tasks.py")

    def run(us):
        return {"remeasured_us": us, "spread_us": [us * 0.99, us * 1.02], "in_run_best_us": us,
                "found_at": 10, "wall_s": 60.0, "wall_min": 1.0}

    rows = [{"task": "a", "weight": 12, "seed": 0,
             "runs": {"bo-depth1": run(110.0), "ms-default": run(100.0)}},
            {"task": "b", "weight": 48, "seed": 0,
             "runs": {"bo-depth1": run(90.0), "ms-default": run(100.0)}}]
    args = type("Args", (), {"network": "net", "trials": 400, "rounds": 10,
                             "reference": "ms-default", "out": str(tmp_path)})
    bench.report(rows, ["bo-depth1", "ms-default"], args)
    with open(os.path.join(tmp_path, "summary.json")) as f:
        summary = json.load(f)
    assert summary["reference"] == "ms-default" and summary["rows"] == rows
    assert summary["over_reference"]["bo-depth1"] == pytest.approx((1.1 * 0.9) ** 0.5)
    assert summary["over_reference"]["ms-default"] == pytest.approx(1.0)
    assert "b (x48), seed 0:" in capsys.readouterr().out


@pytest.mark.parametrize("args, message", [
    (["--bo-depths", "0"], "--bo-depths and --tasks must be at least 1"),
    (["--bo-parent-shares", "1.5"], "--bo-parent-shares from 0 to 1"),
    (["--network", "nope"], "nope"),
    (["--tuners", "bo", "nope"], "nope"),
])
def test_bad_input_is_one_line_before_anything_runs(tmp_path, args, message):
    done = run_bench("heavy_tasks.py", *args, "--out", str(tmp_path / "out"))
    assert done.returncode != 0 and message in done.stderr
    assert "Traceback" not in done.stderr and not os.path.exists(tmp_path / "out")


def test_a_run_with_no_schedule_that_ran_is_one_line_and_not_marked_done(tmp_path):
    import torch
    from tvm.s_tir import meta_schedule as ms

    from datagen.errors import UserError
    from datagen.measure import Measurer
    from datagen.torch_import import relax_module
    from datagen.tvm_env import make_target
    from tuning.tuner import SearchInputs

    bench = bench_module("heavy_tasks.py")
    target = make_target(None)
    model = torch.nn.Sequential(torch.nn.Linear(16, 32)).eval()
    with torch.no_grad():
        mod = relax_module(torch.export.export(model, (torch.randn(4, 16),)), target)
    task = ms.relax_integration.extract_tasks(mod, target)[0]
    measurer = Measurer(target, build_timeout=0.001)  # every build killed: no schedule runs
    try:
        with pytest.raises(UserError, match="found no schedule of .* that built and ran"):
            bench.tune_one(task, target, "random", 8, str(tmp_path / "run"), measurer,
                           SearchInputs())
    finally:
        measurer.close()
    assert not os.path.exists(tmp_path / "run" / "done.json")
