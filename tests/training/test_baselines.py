"""MetaSchedule's XGBModel trained and scored on our records."""

import numpy as np
import pytest

from datagen.records import read_records
from datagen.tvm_env import make_target
from training.baselines import fit_xgb, predict_xgb
from training.metrics import kendall_tau

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
    from training.baselines import load_xgb, save_xgb

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


def test_lightgbm_fits_and_ranks_its_training_data(tiny_dataset):
    from training.baselines import BASELINES, fit_lightgbm, per_store_features, predict_lightgbm

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
    assert BASELINES.names() == ("xgb", "lightgbm")
    runs = BASELINES.get("lightgbm")(frame, frame.head(5), target, [0, 1])
    assert len(runs) == 2 and all(r.shape == (5,) for r in runs)
    np.testing.assert_allclose(runs[0], scores.head(5))
