"""The baselines (MetaSchedule's XGBModel, TenSet's LightGBM and MLP) trained and scored on our
records."""

import numpy as np
import pytest

from datagen.records import read_records
from datagen.tvm_env import make_target
from costmodel.store_models import fit_xgb, predict_xgb
from costmodel.metrics import kendall_tau

pytestmark = pytest.mark.slow


def test_xgb_fits_and_ranks_its_training_data(tiny_dataset):
    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"]
    target = make_target(None)
    model = fit_xgb(frame, target, seed=0)
    scores = predict_xgb(model, frame, target)
    assert scores.index.equals(frame.index) and np.isfinite(scores).all()
    # higher score = faster: on its own training data it must rank better than chance
    assert kendall_tau(frame.workload_key, frame.latency_median, -scores) > 0.2
    again = predict_xgb(fit_xgb(frame, target, seed=0), frame, target)
    np.testing.assert_allclose(again, scores)


def test_saved_xgb_loads_without_pickle_and_predicts_the_same(tiny_dataset, tmp_path):
    from costmodel.store_models import load_xgb, save_xgb

    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"]
    target = make_target(None)
    model = fit_xgb(frame, target, seed=0)
    path = str(tmp_path / "m.xgb.npz")
    save_xgb(model, path, "fitted on tiny")
    with np.load(path, allow_pickle=False) as z:  # arrays only: no object arrays to unpickle
        assert all(z[k].dtype != object for k in z.files)
    loaded = load_xgb(path, "fitted on tiny")
    assert loaded.data_size == model.data_size and set(loaded.data) == set(model.data)
    np.testing.assert_allclose(predict_xgb(loaded, frame, target),
                               predict_xgb(model, frame, target))
    assert load_xgb(path, "fitted on something else") is None
    assert load_xgb(str(tmp_path / "missing.npz")) is None
    one = load_xgb(path, "fitted on tiny", threads=1)  # a tuner on a slice of the cores
    assert one.config.nthread == 1
    np.testing.assert_allclose(predict_xgb(one, frame, target), predict_xgb(model, frame, target))


def test_lightgbm_fits_and_ranks_its_training_data(tiny_dataset):
    from costmodel.store_models import fit_lightgbm, per_store_features, predict_lightgbm
    from costmodel.baselines import BASELINES

    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"]
    target = make_target(None)
    features = per_store_features(frame, target)
    assert len(features) == len(frame) and all(f.shape[1] == features[0].shape[1]
                                               for f in features if len(f))
    model = fit_lightgbm(frame, target, seed=0, features=features)
    assert model.current_iteration() == 2000  # TenSet's rounds
    scores = predict_lightgbm(model, frame, target)
    assert scores.index.equals(frame.index) and np.isfinite(scores).all()
    # it regresses normalised throughput (1 for each workload's fastest, higher is faster)
    assert 0 < scores.max() < 2
    assert kendall_tau(frame.workload_key, frame.latency_median, -scores) > 0.2
    np.testing.assert_array_equal(predict_lightgbm(model, frame, target, features), scores)
    again = predict_lightgbm(fit_lightgbm(frame, target, seed=0, features=features), frame,
                             target, features)
    np.testing.assert_allclose(again, scores)  # seeded
    assert BASELINES.names() == ("xgb", "lightgbm", "mlp")
    runs = BASELINES.get("lightgbm")(frame, frame.head(5), target, [0, 1])
    assert len(runs) == 2 and all(r.shape == (5,) for r in runs)
    np.testing.assert_allclose(runs[0], scores.head(5))


def test_tenset_mlp_fits_and_ranks_its_training_data(tiny_dataset, monkeypatch):
    from costmodel.store_models import (TENSET_MLP, fit_tenset_mlp, per_store_features,
                                        predict_tenset_mlp)
    from costmodel.baselines import BASELINES

    # TenSet's 50 epochs are 50 steps on 36 records: too few to fit them when a loaded
    # machine's timings are noisy; 500 let it learn them (the hyperparameters are otherwise its own)
    monkeypatch.setitem(TENSET_MLP, "epochs", 500)

    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"]
    target = make_target(None)
    features = per_store_features(frame, target)
    model = fit_tenset_mlp(frame, target, seed=0, features=features)
    scores = predict_tenset_mlp(model, frame, target, features)
    assert scores.index.equals(frame.index) and np.isfinite(scores).all()
    assert kendall_tau(frame.workload_key, frame.latency_median, -scores) > 0.2
    np.testing.assert_allclose(predict_tenset_mlp(model, frame, target), scores, rtol=1e-5)
    # seeded: fitted again alike, up to the float sums' order over 500 steps (about 1e-5)
    again = fit_tenset_mlp(frame, target, seed=0, features=features)
    np.testing.assert_allclose(predict_tenset_mlp(again, frame, target, features), scores,
                               rtol=1e-4, atol=1e-4)
    runs = BASELINES.get("mlp")(frame, frame.head(5), target, [0, 1])
    assert len(runs) == 2 and all(r.shape == (5,) for r in runs)
    np.testing.assert_allclose(runs[0], scores.head(5), rtol=1e-4, atol=1e-4)
    assert not np.allclose(runs[0], runs[1])  # another seed, another model


def test_tenset_lambdarank_loss_prefers_the_true_order():
    import torch

    from costmodel.store_models import tenset_lambdarank_loss

    label = torch.tensor([1.0, 0.5, 0.25, 0.1])  # normalised throughput: the first is fastest
    right = tenset_lambdarank_loss(torch.tensor([4.0, 3.0, 2.0, 1.0]), label)
    wrong = tenset_lambdarank_loss(torch.tensor([1.0, 2.0, 3.0, 4.0]), label)
    assert 0 < right < wrong
    # a misorder at the top costs more than the same misorder at the bottom
    top = tenset_lambdarank_loss(torch.tensor([3.0, 4.0, 2.0, 1.0]), label)
    bottom = tenset_lambdarank_loss(torch.tensor([4.0, 3.0, 1.0, 2.0]), label)
    assert top > bottom
    pred = torch.tensor([1.0, 2.0, 3.0, 4.0], requires_grad=True)
    tenset_lambdarank_loss(pred, label).backward()
    assert pred.grad[0] < 0 < pred.grad[3]  # descent raises the fastest, lowers the slowest


def test_store_features_are_read_from_the_featurizer_cache(tiny_dataset, tmp_path):
    from costmodel.featurize import Featurizer
    from costmodel.store_models import per_store_features

    frame = read_records(tiny_dataset)
    frame = frame[frame.status == "ok"].head(12)
    target = make_target(None)
    featurizer = Featurizer(target, cache_dir=tmp_path, stores=True)
    list(featurizer.iter_records(zip(frame.workload_ir, frame.trace, frame.trace_hash)))
    fresh = per_store_features(frame, target)
    cached = per_store_features(frame, target, cache_dir=str(tmp_path))
    assert len(cached) == len(fresh)
    for a, b in zip(cached, fresh):  # the Featurizer caches what XGBModel would extract
        np.testing.assert_array_equal(a, b)
    # and what the cache holds is what comes back (read, not lowered again)
    [path] = tmp_path.rglob(f"*-{frame.trace_hash.iloc[3]}.npy")
    marker = np.full((1, fresh[3].shape[1]), 7, np.float32)
    np.save(path, marker, allow_pickle=False)
    np.testing.assert_array_equal(per_store_features(frame, target, cache_dir=str(tmp_path))[3],
                                  marker)


@pytest.mark.parametrize("name", ["xgb", "lightgbm", "mlp"])
def test_every_store_model_fits_scores_saves_and_loads_through_one_interface(tiny_dataset,
                                                                            tmp_path, name,
                                                                            monkeypatch):
    """`STORE_MODELS`: fit on the records, score them (higher is faster), save to arrays
    only, load back scoring the same, and say what it was fitted on; a damaged file or one of
    another kind is one line."""
    from costmodel.store_models import STORE_MODELS, load_store_model
    from datagen.errors import UserError
    from costmodel.store_models import TENSET_MLP
    from datagen.tvm_env import target_json

    monkeypatch.setitem(TENSET_MLP, "epochs", 500)  # as in the test above
    frame = read_records(tiny_dataset)
    target = make_target(None)
    model = STORE_MODELS.get(name).fit(frame, target, seed=0)
    ok = frame[frame.status == "ok"]
    assert model.fitted_on["model"] == name and model.fitted_on["records"] == len(ok)
    assert model.fitted_on["workloads"] == ok.workload_key.nunique()
    assert model.fitted_on["target"] == target_json(target) and model.fitted_on["seed"] == 0
    scores = model.score(ok)
    assert scores.index.equals(ok.index) and np.isfinite(scores).all()
    assert kendall_tau(ok.workload_key, ok.latency_median, -scores) > 0.2
    path = str(tmp_path / f"{name}.npz")
    model.save(path)
    with np.load(path, allow_pickle=False) as z:  # arrays only: nothing to unpickle
        assert all(z[k].dtype != object for k in z.files)
    loaded = load_store_model(path)
    assert type(loaded) is type(model) and loaded.fitted_on == model.fitted_on
    if name != "mlp":
        np.testing.assert_allclose(loaded.score(ok), scores, rtol=1e-6)
    if name == "lightgbm":  # its text without what only training reads, predicting the same
        from costmodel.companions import unpack
        from costmodel.store_models import TRAINING_ONLY

        with np.load(path, allow_pickle=False) as z:
            text = unpack(z["model"]).decode()
        assert "leaf_value=" in text and not any(key in text for key in TRAINING_ONLY)
    if name == "mlp":  # its matrices stored as int8: the scores move by a small share of their spread
        np.testing.assert_allclose(loaded.score(ok), scores, atol=0.02 * np.ptp(scores))
        with np.load(path, allow_pickle=False) as z:
            assert all(z[k].dtype == np.uint8 for k in z.files
                       if k.startswith("weight:") and f"qscale:{k[7:]}" in z.files)
            arrays = {k: z[k] for k in z.files if k[:7] not in ("weight:", "qscale:")}
        net, _ = model.model  # the float32 layout of the files before: loads as it was
        np.savez(str(tmp_path / "f32.npz"), **arrays, **{
            f"weight:{k}": v.numpy() for k, v in net.state_dict().items()})
        np.testing.assert_allclose(load_store_model(str(tmp_path / "f32.npz")).score(ok),
                                   scores, rtol=1e-6)
        np.savez(str(tmp_path / "bad.npz"), **arrays, **{  # a weight of another shape
            f"weight:{k}": v.numpy()[..., :1] for k, v in net.state_dict().items()})
        with pytest.raises(UserError, match="bad.npz is not a readable store model"):
            load_store_model(str(tmp_path / "bad.npz"))
    with open(path, "r+b") as f:
        f.truncate(100)
    with pytest.raises(UserError, match=f"{name}.npz is not a readable store model"):
        load_store_model(path)
    np.savez(str(tmp_path / "other.npz"), kind=np.array("forest"), fitted_on=np.array("{}"))
    with pytest.raises(UserError, match="holds a 'forest' model; store models are xgb, "
                                        "lightgbm, mlp"):
        load_store_model(str(tmp_path / "other.npz"))
    with pytest.raises(UserError, match="missing.npz is not a readable store model"):
        load_store_model(str(tmp_path / "missing.npz"))


def test_a_matrix_quantised_to_int8_keeps_each_value_within_half_a_step_of_its_row():
    from costmodel.store_models import quantised

    matrix = np.random.default_rng(0).normal(size=(6, 50)).astype(np.float32)
    matrix[2] = 0.0  # a row of zeros keeps a usable scale
    q, scale = quantised(matrix)
    assert q.dtype == np.int8 and scale.dtype == np.float32 and np.abs(q).max() <= 127
    assert (np.abs(q * scale[:, None] - matrix) <= scale[:, None] / 2 + 1e-7).all()
    assert not q[2].any()


def test_the_xgbmodel_trained_on_for_measured_programs_ranks_them_better():
    """`XGBStoreModel.trained_on`: a few more boosting rounds on one workload's measured
    programs, with MetaSchedule's pack-sum loss, as bo-learn's prior learns from a run."""
    import types

    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum, XGBConfig

    from costmodel.store_models import XGBStoreModel

    rng = np.random.default_rng(0)
    stores = [rng.random((int(rng.integers(1, 4)), 8)).astype(np.float32) for _ in range(60)]
    log_latency = np.array([s[:, 0].sum() + 0.5 * s[:, 1].sum() for s in stores])
    noise = PackSum(xs=stores, ys=rng.random(60))  # a booster that learned nothing of them
    booster = xgb.train(XGBConfig(nthread=1).to_dict(), noise.dmatrix, num_boost_round=5,
                        obj=lambda pred, _d: noise.obj_square_error(pred))
    start = XGBStoreModel(types.SimpleNamespace(booster=booster), {"records": 7})
    trained = start.trained_on(stores, log_latency, rounds=20, threads=1)
    assert booster.num_boosted_rounds() == 5  # the start left as it was
    assert trained.fitted_on == {"records": 7, "trained_on": 60}
    before, after = start.throughput(stores), trained.throughput(stores)
    assert len(after) == 60
    one = np.zeros(60)  # one workload
    assert kendall_tau(one, log_latency, -after) > max(kendall_tau(one, log_latency, -before), 0.5)


def test_the_xgbmodel_trained_on_several_workloads_scales_each_by_its_own_fastest():
    """`trained_on(..., groups=)`: a network's tasks trained on together, each program's
    throughput over its own task's fastest (MetaSchedule's XGBModel's scaling), so a task a
    hundred times slower than another is learnt as well as the fast one; over the run's
    fastest alone its weights would all be near zero."""
    import types

    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum, XGBConfig

    from costmodel.store_models import XGBStoreModel

    rng = np.random.default_rng(0)
    stores = [rng.random((int(rng.integers(1, 4)), 8)).astype(np.float32) for _ in range(120)]
    slow = np.arange(120) >= 60  # the second task, flagged by feature 7, its cost in feature 1
    for rows, flag in zip(stores, slow):
        rows[:, 7] = flag
    log_latency = np.array([np.log(100) + 2 * s[:, 1].sum() if flag else 2 * s[:, 0].sum()
                            for s, flag in zip(stores, slow)])
    noise = PackSum(xs=stores, ys=rng.random(120))
    booster = xgb.train(XGBConfig(nthread=1).to_dict(), noise.dmatrix, num_boost_round=5,
                        obj=lambda pred, _d: noise.obj_square_error(pred))
    start = XGBStoreModel(types.SimpleNamespace(booster=booster), {"records": 7})
    by_task = start.trained_on(stores, log_latency, rounds=20, threads=1, groups=slow)
    as_one = start.trained_on(stores, log_latency, rounds=20, threads=1)
    assert by_task.fitted_on == {"records": 7, "trained_on": 120}
    task = slow.astype(int)
    for part in (~slow, slow):
        tau = kendall_tau(task[part], log_latency[part], -by_task.throughput(
            [s for s, p in zip(stores, part) if p]))
        assert tau > 0.5
    slow_stores = [s for s, p in zip(stores, slow) if p]
    assert kendall_tau(task[slow], log_latency[slow], -by_task.throughput(slow_stores)) > \
        kendall_tau(task[slow], log_latency[slow], -as_one.throughput(slow_stores)) + 0.1
