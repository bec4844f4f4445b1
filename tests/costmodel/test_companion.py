"""`costmodel blend`: a checkpoint's LightGBM companion, fitted on its training records, and
what loading a checkpoint with one beside it predicts, on a real (tiny) measured dataset."""

import json
import shutil

import numpy as np
import pytest

from conftest import assert_clean_error, run_cli
from datagen.errors import UserError

pytestmark = pytest.mark.slow


@pytest.fixture
def own_checkpoint(tiny_checkpoint, tmp_path):
    """A copy of the tiny checkpoint: a companion written beside it stays in this test."""
    path = tmp_path / "model.ckpt"
    shutil.copy(tiny_checkpoint, path)
    return str(path)


def test_a_blended_checkpoint_predicts_the_blend_and_evaluates_as_it(own_checkpoint,
                                                                     tiny_dataset, tmp_path):
    from costmodel import blend
    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records
    from datagen.tvm_env import make_target
    from costmodel.store_models import fit_lightgbm, per_store_features, predict_lightgbm
    from costmodel.splits import training_records, usable
    from tuning.runs import model_ids
    from tuning.tuner import SearchInputs

    proc = run_cli("blend", own_checkpoint, "--weight", "0.4", prog="costmodel", check=True)
    companion = blend.beside(own_checkpoint)
    assert f"wrote {companion}" in proc.stdout
    blended = CostModelPredictor.load(own_checkpoint)
    alone = CostModelPredictor.load(own_checkpoint, blend=False)
    assert blended.companion.weight == 0.4 and alone.companion is None
    assert blended.files == [own_checkpoint, companion] and "blended with" in repr(blended)

    # the same LightGBM fitted here on the checkpoint's training records, blended by hand
    meta = alone.meta
    target = make_target(json.loads(meta["target"]))
    train = training_records(own_checkpoint, meta, None, "this test")
    booster = fit_lightgbm(train, target, features=per_store_features(train, target))
    frame, _ = usable(read_records(tiny_dataset))
    expected = blend.blend(np.log(alone.predict_records(frame)),
                           predict_lightgbm(booster, frame, target).to_numpy(),
                           frame.workload_key.to_numpy(), 0.4)
    np.testing.assert_allclose(np.log(blended.predict_records(frame)), expected, atol=1e-9)
    # the tuning benchmark names the companion among the models a run was made with
    ids = model_ids(SearchInputs(blended))["checkpoints"]
    assert [m["file"] for m in ids] == ["model.ckpt", "model.lgb.npz"]

    out = tmp_path / "eval"
    run_cli("evaluate", own_checkpoint, "--dataset", tiny_dataset, "--out", str(out),
            "--no-baseline", prog="costmodel", check=True)
    report = json.loads((out / "report.json").read_text())
    assert report["models"]["graphsage"]["blended_with"] == \
        [{"file": "model.lgb.npz", "with": "lightgbm", "weight": 0.4}]
    assert "blends the network (0.4) with TenSet's LightGBM" in (out / "report.md").read_text()
    run_cli("evaluate", own_checkpoint, "--dataset", tiny_dataset, "--out", str(out),
            "--no-baseline", "--no-blend", prog="costmodel", check=True)
    assert json.loads((out / "report.json").read_text())["models"]["graphsage"][
        "blended_with"] == [None]

    # bo tunes with the blend as its prior, inside MetaSchedule's loop
    proc = run_cli("run", "dense/m32_n32_k32", "--trials", "8", "--trials-per-iter", "4",
                   "--out", str(tmp_path / "tune"), "--checkpoint", own_checkpoint,
                   "--no-progress", prog="tune", check=True)
    assert "8 trials, best" in proc.stdout


def test_a_checkpoint_blends_with_its_pretrained_xgbmodel_as_xgbmodel_predicts(
        own_checkpoint, tiny_dataset, tmp_path):
    from costmodel import blend
    from costmodel.predictor import CostModelPredictor
    from datagen.records import read_records
    from datagen.tvm_env import make_target
    from costmodel import pretrained_xgb
    from costmodel.store_models import load_xgb, predict_xgb
    from costmodel.splits import usable
    from tuning.search import PriorMix

    proc = run_cli("blend", own_checkpoint, "--with", "xgb", "--weight", "0.3",
                   prog="costmodel", check=True)
    path = pretrained_xgb.beside(own_checkpoint)
    assert f"wrote {path}: 0.3 of the network blended with 0.7 of MetaSchedule's XGBModel" \
        in proc.stdout
    blended = CostModelPredictor.load(own_checkpoint)
    alone = CostModelPredictor.load(own_checkpoint, blend=False)
    assert blended.companion.name == "xgb" and blended.companion.weight == 0.3
    # the file is still ms-xgb-pretrained's model, found beside the checkpoint
    assert pretrained_xgb.pretrained_xgb_file(own_checkpoint, alone.meta,
                                              str(tmp_path / "cache")) == path

    # the companion's scores are XGBModel's own (its features extracted by MetaSchedule)
    frame, _ = usable(read_records(tiny_dataset))
    target = make_target(json.loads(alone.meta["target"]))
    scores = predict_xgb(load_xgb(path), frame, target).to_numpy()
    expected = blend.blend(np.log(alone.predict_records(frame)), scores,
                           frame.workload_key.to_numpy(), 0.3)
    np.testing.assert_allclose(np.log(blended.predict_records(frame)), expected, atol=1e-5)
    # bo-mix reads XGBModel once, from the companion, beside the network
    assert PriorMix(blended, 0, xgb=load_xgb(path)).names == ["network", "xgb"]

    # a weight again: the model is kept, the weight replaced
    with np.load(path, allow_pickle=False) as f:
        fitted = f["booster_ubj"].tobytes()
    run_cli("blend", own_checkpoint, "--with", "xgb", "--weight", "0.6", prog="costmodel",
            check=True)
    assert CostModelPredictor.load(own_checkpoint).companion.weight == 0.6
    with np.load(path, allow_pickle=False) as f:
        assert f["booster_ubj"].tobytes() == fitted


def test_blend_bad_input_is_one_line(own_checkpoint, tiny_checkpoint, tiny_dataset, tmp_path):
    from costmodel import blend

    proc = run_cli("blend", own_checkpoint, "--weight", "1.5", prog="costmodel")
    assert_clean_error(proc, "in [0, 1], not 1.5", prog="costmodel")
    proc = run_cli("blend", own_checkpoint, "--dataset", str(tmp_path / "missing"),
                   prog="costmodel")
    assert_clean_error(proc, "which does not exist", prog="costmodel")
    assert not (tmp_path / "model.lgb.npz").exists()

    # a companion fitted for another checkpoint's records is refused where it is used
    other = tmp_path / "other"
    other.mkdir()
    run_cli("blend", own_checkpoint, "--out", str(other / "model.lgb.npz"), prog="costmodel",
            check=True)
    with np.load(other / "model.lgb.npz", allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    arrays["fitted_on"] = np.array(json.dumps({**json.loads(str(arrays["fitted_on"])),
                                               "fingerprint": "0" * 40}))
    np.savez(blend.beside(own_checkpoint), **arrays)
    proc = run_cli("evaluate", own_checkpoint, "--dataset", tiny_dataset, "--out",
                   str(tmp_path / "eval"), "--no-baseline", prog="costmodel")
    assert_clean_error(proc, "fitted on other records", prog="costmodel")
    assert not (tmp_path / "eval").exists()


def test_what_is_fitted_beside_a_checkpoint_of_a_share_sees_that_share(tiny_dataset, tmp_path):
    """A model trained on a share of the records (the transfer benchmark's few-shot runs) gets
    a companion, and baselines in `costmodel evaluate`, fitted on that share, not on every
    record of its training workloads."""
    import glob

    from conftest import train_tiny
    from costmodel import blend
    from costmodel.checkpoint import load
    from datagen.records import read_records
    from costmodel.splits import share_of_records, training_records, usable

    proc = train_tiny("--data.dataset", tiny_dataset, "--trainer.max_epochs", "1",
                      "--data.train_share", "0.5", "--data.share_seed", "3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (ckpt,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    share = load(ckpt).meta["train_share"]
    assert share["share"] == 0.5 and share["records"] < share["of"]

    run_cli("blend", ckpt, prog="costmodel", check=True)
    from costmodel.store_models import load_store_model

    assert load_store_model(blend.beside(ckpt)).fitted_on["records"] == share["records"]
    out = tmp_path / "eval"
    run_cli("evaluate", ckpt, "--dataset", tiny_dataset, "--out", str(out), "--baselines",
            "xgb", prog="costmodel", check=True)
    assert json.loads((out / "report.json").read_text())["baseline_train_records"] == \
        [share["records"]]

    # the same draw as training's, from the same records
    meta = load(ckpt).meta
    frame, _ = usable(read_records(tiny_dataset))
    train = frame[frame.workload_key.isin(meta["sides"]["train"])].reset_index(drop=True)
    expected = share_of_records(train, 0.5, 3)
    got = training_records(ckpt, meta, None, "this test")
    assert list(got.trace_hash) == list(expected.trace_hash)

    # records that differ from those the checkpoint counted: the share cannot be drawn again
    meta["train_share"] = {**share, "of": share["of"] + 1}
    with pytest.raises(UserError, match="cannot be drawn again"):
        training_records(ckpt, meta, None, "this test")


def test_a_joint_checkpoints_companions_fit_the_joint_records_it_trained_on(tiny_dataset,
                                                                            tmp_path):
    """A checkpoint trained beside another CPU's records, split unseen-family (that CPU's
    programs of the held-out family left out): the records its companions and baselines fit
    are those the network trained on, its own training side's and the other CPU's share, drawn
    again; records of the joint folder that changed since are one line."""
    import glob

    import pyarrow.parquet as pq

    from conftest import another_cpu_copy, train_tiny
    from costmodel.checkpoint import load
    from costmodel.companions import fingerprint
    from costmodel.data_module import JOINT_PREFIX, ScheduleDataModule, trained_records
    from datagen.records import shard_paths

    other = another_cpu_copy(tiny_dataset, tmp_path / "other", "test-cpu")
    cache = str(tmp_path / "cache")
    proc = train_tiny("--data.dataset", tiny_dataset, "--data.split", "unseen-family",
                      "--data.joint_dataset", other, "--data.joint_share", "0.5",
                      "--data.cache_dir", cache, "--trainer.max_epochs", "1", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    (ckpt,) = glob.glob(str(tmp_path / "runs" / "graphsage" / "checkpoints" / "*.ckpt"))
    meta = load(ckpt).meta
    joint = meta["joint"]  # one folder: its description
    assert joint["left_out"] > 0 and joint["records"] < joint["of"]

    data = ScheduleDataModule(dataset=tiny_dataset, split="unseen-family",
                              test_families=["softmax"], val_fraction=0.5, cache_dir=cache,
                              joint_dataset=other, joint_share=0.5)
    data.setup()
    trained = data.frames["train"]
    got = trained_records(ckpt, meta, None, "this test")
    assert sorted(zip(got.workload_key, got.trace_hash)) == \
        sorted(zip(trained.workload_key, trained.trace_hash))
    assert got.workload_key.str.startswith(JOINT_PREFIX).sum() == joint["records"]
    assert fingerprint(meta) != fingerprint({**meta, "joint": []})  # a companion of its own

    # the joint folder changed since: its share cannot be drawn again
    path = shard_paths(other)[0]
    table = pq.read_table(path)
    pq.write_table(table.slice(0, len(table) // 2), path)
    with pytest.raises(UserError, match=r"a 0.5 share of the \d+ records of joint dataset .* "
                                        r"which now has \d+: that share cannot be drawn again"):
        trained_records(ckpt, meta, None, "this test")


def test_a_checkpoint_blends_with_several_tree_models_at_their_shares(own_checkpoint,
                                                                      tiny_dataset, tmp_path):
    """`costmodel blend --with xgb mlp --weight W --shares A B`: TenSet's MLP fitted on the
    checkpoint's training records beside its pretrained XGBModel, each file holding the
    network's share and its own; the checkpoint then predicts the three-way blend (each part
    standardised per workload), bo-mix reads each part, `tune --network-share` scales the
    trees' shares alike, and blending with one model again takes the other's weight away."""
    from costmodel import blend, companions
    from costmodel.predictor import CostModelPredictor
    from costmodel.store_models import load_store_model, load_xgb, per_store_features
    from costmodel.splits import usable
    from datagen.records import read_records
    from datagen.tvm_env import make_target
    from tuning.search import PriorMix

    proc = run_cli("blend", own_checkpoint, "--with", "xgb", "mlp", "--weight", "0.2",
                   "--shares", "0.5", "0.3", prog="costmodel", check=True)
    xgb_path = companions.beside(own_checkpoint, companions.XGB_SUFFIX)
    mlp_path = companions.beside(own_checkpoint, companions.MLP_SUFFIX)
    assert f"wrote {xgb_path}, {mlp_path}: 0.2 of the network blended with 0.5 of " \
           "MetaSchedule's XGBModel and 0.3 of TenSet's MLP" in proc.stdout
    assert blend.stored_weights(xgb_path) == (0.2, 0.5)
    assert blend.stored_weights(mlp_path) == (0.2, 0.3)
    blended = CostModelPredictor.load(own_checkpoint)
    alone = CostModelPredictor.load(own_checkpoint, blend=False)
    c = blended.companion
    assert c.name == "xgb+mlp" and c.weight == 0.2
    np.testing.assert_allclose(c.shares, [0.5, 0.3])
    assert blended.files == [own_checkpoint, xgb_path, mlp_path]

    # the blend by hand: each model's own scores, standardised per workload
    frame, _ = usable(read_records(tiny_dataset))
    target = make_target(json.loads(alone.meta["target"]))
    mlp = load_store_model(mlp_path)
    from costmodel.store_models import predict_xgb
    xgb_scores = predict_xgb(load_xgb(xgb_path), frame, target).to_numpy()
    mlp_scores = mlp.score(frame, per_store_features(frame, target)).to_numpy()
    groups = frame.workload_key.to_numpy()
    log_alone = np.log(alone.predict_records(frame))
    expected = blend.blend(log_alone, np.stack([xgb_scores, mlp_scores], axis=1), groups, 0.2,
                           [0.5, 0.3])
    np.testing.assert_allclose(np.log(blended.predict_records(frame)), expected, atol=1e-4)
    # the MLP scores a program's store rows as it scores the records
    np.testing.assert_allclose(mlp.throughput(per_store_features(frame, target)), mlp_scores,
                               rtol=1e-5, atol=1e-5)
    # bo-mix: one part per model
    assert PriorMix(blended, 0, xgb=load_xgb(xgb_path)).names == ["network", "xgb", "mlp"]
    # the network's share set later (tune --network-share) scales the trees' alike
    c.weight = 0.6
    np.testing.assert_allclose(c.shares, [0.25, 0.15])

    # the report names both files and their shares
    out = tmp_path / "eval"
    run_cli("evaluate", own_checkpoint, "--dataset", tiny_dataset, "--out", str(out),
            "--no-baseline", prog="costmodel", check=True)
    assert json.loads((out / "report.json").read_text())["models"]["graphsage"][
        "blended_with"] == [{"file": "model.xgb.npz", "with": "xgb+mlp", "weight": 0.2,
                             "files": ["model.xgb.npz", "model.mlp.npz"],
                             "shares": [0.5, 0.3]}]
    # saved elsewhere (an ensemble's companions are copied): both files follow, as they are
    copy = tmp_path / "copy" / "again.ckpt"
    copy.parent.mkdir()
    blended.companion.weight = 0.2
    blended.save(str(copy))
    again = CostModelPredictor.load(str(copy))
    assert again.companion.name == "xgb+mlp"
    np.testing.assert_allclose(again.companion.shares, [0.5, 0.3])

    # one of a blend's files gone: one line where it is loaded
    moved = tmp_path / "mlp.npz"
    shutil.move(mlp_path, moved)
    with pytest.raises(UserError, match=r"do not add up to 1 \(one of the blend's files "
                                        r"missing\?\); write the blend again"):
        CostModelPredictor.load(own_checkpoint)
    shutil.move(moved, mlp_path)
    # blending with one model again: the MLP is kept on disk, no longer blended
    with np.load(mlp_path, allow_pickle=False) as f:
        weights = {k: f[k].copy() for k in f.files if k.startswith("weight:")}
    run_cli("blend", own_checkpoint, "--with", "mlp", "--weight", "0.4", prog="costmodel",
            check=True)
    assert blend.stored_weights(xgb_path) == (None, None)
    assert blend.stored_weights(mlp_path) == (0.4, None)
    with np.load(mlp_path, allow_pickle=False) as f:  # kept, not fitted again
        assert all(np.array_equal(f[k], v) for k, v in weights.items())
    only = CostModelPredictor.load(own_checkpoint).companion
    assert only.name == "mlp" and only.weight == 0.4


def test_blend_of_several_bad_input_is_one_line(own_checkpoint, tmp_path):
    import os

    for args, message in (
            (["--with", "xgb", "mlp"], "give each of the 2 tree models its share"),
            (["--with", "xgb", "mlp", "--shares", "0.5"], "1 shares for 2 tree models"),
            (["--with", "xgb", "mlp", "--weight", "0.2", "--shares", "0.5", "0.5"],
             "must be in [0, 1] and add up to 1"),
            (["--with", "xgb", "xgb", "--shares", "0.2", "0.3"], "names a model twice"),
            (["--with", "xgb", "mlp", "--shares", "0.2", "0.3", "--out",
              str(tmp_path / "x.npz")], "--out names one file")):
        proc = run_cli("blend", own_checkpoint, *args, prog="costmodel")
        assert_clean_error(proc, message, prog="costmodel")
    assert not [f for f in os.listdir(tmp_path) if f.endswith(".npz")]
