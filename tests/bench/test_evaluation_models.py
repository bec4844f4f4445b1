"""The evaluation checkpoints are not shipped: a benchmark that needs one says how to make it."""

import os
import sys

import pytest

BENCH = os.path.join(os.path.dirname(__file__), "..", "..", "bench")
sys.path.insert(0, BENCH)
import evaluation_models  # noqa: E402  (a benchmark's module, not a package)


def test_a_missing_evaluation_checkpoint_says_how_to_make_it(monkeypatch, tmp_path):
    from datagen.errors import UserError

    monkeypatch.setattr(evaluation_models, "FOLDER", str(tmp_path))
    for name, how in evaluation_models.MADE_BY.items():
        with pytest.raises(UserError, match=f"git show .*:checkpoints/{name} > bench/models/"):
            evaluation_models.path(name)
        with pytest.raises(UserError, match="train fit --config configs/"):
            evaluation_models.path(name)
    # the first model's pretrained XGBModel shipped beside it: restored with it
    with pytest.raises(UserError, match="and its graphsage.xgb.npz the same way"):
        evaluation_models.path("graphsage.ckpt")
    (tmp_path / "graphsage-v2-networks.ckpt").write_bytes(b"")
    assert evaluation_models.path("graphsage-v2-networks.ckpt") == \
        str(tmp_path / "graphsage-v2-networks.ckpt")

