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
