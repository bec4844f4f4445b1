"""The learned model as MetaSchedule's cost model inside a real `tune_tir`."""

import shutil

import numpy as np
import pytest

from conftest import run_cli

pytestmark = pytest.mark.slow


def test_tune_tir_with_learned_cost_model(tiny_checkpoint, tmp_path):
    import torch
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from datagen.builder import PersistentBuilder
    from datagen.tvm_env import make_target, metaschedule_logging
    from datagen.workloads import Workload
    from tuning.cost_model import LearnedCostModel

    model = LearnedCostModel(tiny_checkpoint, adapt_steps=5)
    before = [p.detach().clone() for p in model.predictor.members[0].model.parameters()]
    builder = PersistentBuilder("llvm")
    try:
        with metaschedule_logging():
            ms.tune_tir(Workload("dense", (32, 32, 32)).mod, make_target(None), str(tmp_path),
                        max_trials_global=8, num_trials_per_iter=4, builder=builder,
                        cost_model=model, seed=0)
    finally:
        builder.shutdown()
    assert len(JSONDatabase(work_dir=str(tmp_path)).get_all_tuning_records()) >= 4
    assert len(model.measured) >= 4  # update saw the measurements ...
    after = list(model.predictor.members[0].model.parameters())
    assert any(not torch.equal(a, b) for a, b in zip(after, before))  # ... and adapted

    # save and load give the same predictions
    path = str(tmp_path / "adapted.ckpt")
    model.save(path)
    graphs = [g for g, _, _ in model.measured]
    again = LearnedCostModel(path)
    np.testing.assert_array_equal(again.predictor.predict_graphs(graphs),
                                  model.predictor.predict_graphs(graphs))


def test_the_learned_cost_model_scores_a_checkpoint_blended_with_its_xgbmodel(tiny_checkpoint,
                                                                               tmp_path):
    """ms-ours with the kind of prior `tune` ships: the adapter's own copy of the predictor
    shares the blend's XGBModel (a TVM object, which cannot be deep-copied) and scores as the
    caller's predictor does; its weight is its own."""
    from tvm.s_tir import meta_schedule as ms

    from costmodel.predictor import CostModelPredictor
    from datagen.sampler import ScheduleSampler
    from datagen.tvm_env import make_target
    from datagen.workloads import Workload
    from tuning.cost_model import REFERENCE_SECS, LearnedCostModel

    checkpoint = str(tmp_path / "model.ckpt")
    shutil.copy(tiny_checkpoint, checkpoint)
    run_cli("blend", checkpoint, "--with", "xgb", "--weight", "0.3", prog="costmodel",
            check=True)
    predictor = CostModelPredictor.load(checkpoint)
    model = LearnedCostModel(predictor)
    assert model.predictor.companion.model is predictor.companion.model
    model.predictor.companion.weight = 1.0
    assert predictor.companion.weight == 0.3
    model.predictor.companion.weight = 0.3

    mod, target = Workload("dense", (32, 32, 32)).mod, make_target(None)
    context = ms.TuneContext(mod=mod, target=target)
    schedules = [c.sch for c in ScheduleSampler(mod, target).random(6, 0, set())]
    candidates = [ms.MeasureCandidate(sch, ms.arg_info.ArgInfo.from_prim_func(sch.mod["main"]))
                  for sch in schedules]
    np.testing.assert_allclose(model.predict(context, candidates),
                               REFERENCE_SECS / predictor.predict(schedules), rtol=1e-6)


def test_a_checkpoint_of_another_target_kind_is_refused(tiny_checkpoint):
    """A CPU checkpoint in a CUDA tuning run would lower every candidate for the CPU: the
    error reaches the caller through MetaSchedule (as its FFI forwards a Python error)."""
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from datagen.tvm_env import make_target
    from datagen.workloads import Workload
    from tuning.cost_model import LearnedCostModel

    model = LearnedCostModel(tiny_checkpoint)
    mod = Workload("dense", (32, 32, 32)).mod
    context = ms.TuneContext(mod=mod, target=make_target({"kind": "cuda", "arch": "sm_90a"}))
    candidate = ms.MeasureCandidate(tvm.s_tir.Schedule(mod),
                                    ms.arg_info.ArgInfo.from_prim_func(mod["main"]))
    message = "the checkpoint was trained for llvm targets, not cuda; pass a checkpoint"
    with pytest.raises(RuntimeError, match=message):
        model.predict(context, [candidate])
    result = ms.runner.RunnerResult(run_secs=[tvm.runtime.convert(1e-3)], error_msg=None)
    with pytest.raises(RuntimeError, match=message):
        model.update(context, [candidate], [result])
    assert model.measured == []  # nothing learnt from the wrong target's programs


def test_tune_tir_with_the_mixture_cost_model(tiny_checkpoint, tmp_path):
    """ms-mix's cost model in a real `tune_tir`: EvolutionarySearch scores with it, and each
    round's measurements reweigh the network and the pretrained XGBModel."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from costmodel.predictor import CostModelPredictor
    from costmodel.store_models import load_xgb
    from datagen.builder import PersistentBuilder
    from datagen.tvm_env import make_target, metaschedule_logging
    from datagen.workloads import Workload
    from costmodel.pretrained_xgb import pretrained_xgb_file
    from tuning.cost_model import MixtureCostModel

    predictor = CostModelPredictor.load(tiny_checkpoint)
    xgb = load_xgb(pretrained_xgb_file(tiny_checkpoint, predictor.meta, str(tmp_path / "cache"),
                                       progress=False))
    model = MixtureCostModel(predictor, xgb, seed=0)
    builder = PersistentBuilder("llvm")
    try:
        with metaschedule_logging():
            ms.tune_tir(Workload("dense", (32, 32, 32)).mod, make_target(None),
                        str(tmp_path / "work"), max_trials_global=8, num_trials_per_iter=4,
                        builder=builder, cost_model=model, seed=0)
    finally:
        builder.shutdown()
    assert len(JSONDatabase(work_dir=str(tmp_path / "work")).get_all_tuning_records()) >= 4
    assert len(model.measured) >= 4  # update saw the measurements ...
    assert model.surrogate.names == ["network", "xgb"]
    assert model.surrogate.weight_log[-1]["measured"] == len(model.measured)  # ... and refitted
