"""The blend of the network with its LightGBM companion: the arithmetic, and the file."""

import json
import os

import numpy as np
import pytest

from costmodel import blend
from costmodel.store_models import LightGBMStoreModel, load_store_model, prediction_text
from datagen.errors import UserError

META = {"sides": {"train": ["dense/a", "conv2d/b"]}, "target": '{"kind": "llvm"}'}


def test_each_workload_is_standardised_on_its_own():
    z = blend.standardised(np.array([1.0, 2.0, 3.0, 10.0, 30.0, 5.0]),
                           np.array(["a", "a", "a", "b", "b", "c"]))
    np.testing.assert_allclose(z, [-1, 0, 1, -0.70710678, 0.70710678, 0])


def test_the_blend_ranks_within_each_workload_on_the_networks_scale():
    rng = np.random.default_rng(0)
    groups = np.repeat(["a", "b"], 20)
    ours = np.log(rng.uniform(1e-5, 1e-3, 40))
    theirs = rng.uniform(0, 1, 40)
    mixed = blend.blend(ours, theirs, groups, 0.5)
    for g in ("a", "b"):  # the network's mean and spread in each workload are kept
        idx = groups == g
        assert mixed[idx].mean() == pytest.approx(ours[idx].mean())
        z = blend.standardised(ours[idx], np.zeros(20)) + blend.standardised(
            -theirs[idx], np.zeros(20))
        np.testing.assert_array_equal(np.argsort(mixed[idx]), np.argsort(z))
    np.testing.assert_allclose(blend.blend(ours, theirs, groups, 1.0), ours)
    alone = blend.blend(ours, theirs, groups, 0.0)  # all LightGBM: its order, faster first
    np.testing.assert_array_equal(np.argsort(alone[:20]), np.argsort(-theirs[:20]))
    # a workload's blend does not depend on the other workloads scored with it
    np.testing.assert_allclose(blend.blend(ours[:20], theirs[:20], groups[:20], 0.5),
                               mixed[:20])


def test_a_workload_of_one_program_keeps_the_networks_prediction():
    assert blend.blend(np.array([-9.0]), np.array([0.3]), ["a"], 0.5) == [-9.0]
    same = np.array([-9.0, -9.0])  # no spread: the network's value, whatever LightGBM says
    np.testing.assert_allclose(blend.blend(same, np.array([0.1, 0.9]), ["a", "a"], 1.0), same)
    assert blend.blend(np.zeros(0), np.zeros(0), [], 0.5).shape == (0,)


@pytest.fixture(scope="module")
def booster():
    import lightgbm as lgb

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    return lgb.train({"verbosity": -1, "num_threads": 1, "seed": 0},
                     lgb.Dataset(x, label=x[:, 0]), num_boost_round=5)


def test_a_companion_round_trips_without_pickle(booster, tmp_path):
    path = str(tmp_path / "m.lgb.npz")
    info = {"fingerprint": blend.fingerprint(META), "records": 200}
    blend.Companion(LightGBMStoreModel(booster, info), 0.3).save(path)
    with np.load(path, allow_pickle=False) as f:  # arrays of numbers and text only
        assert {k: f[k].dtype.kind for k in f.files} == \
            {"kind": "U", "fitted_on": "U", "model": "u", "blend_weight": "f"}
    back = blend.Companion.load(path, META, "m.ckpt")
    assert back.weight == 0.3 and back.info == info and back.path == path
    assert back.name == "lightgbm" and back.fits(META)
    import lightgbm as lgb

    assert back.model.model.model_to_string() == \
        lgb.Booster(model_str=prediction_text(booster)).model_to_string()  # the text predicting
    # the same file is a store model to the one interface, the weight aside
    assert load_store_model(path).fitted_on == info
    assert os.listdir(tmp_path) == ["m.lgb.npz"]  # no temporary file left
    rows = [np.random.default_rng(1).normal(size=(n, 5)) for n in (3, 0, 1)]
    np.testing.assert_allclose(back.throughput(rows), [booster.predict(rows[0]).sum(), 0.0,
                                                       booster.predict(rows[2]).sum()])


def _lightgbm(booster, weight: float) -> blend.Companion:
    return blend.Companion(LightGBMStoreModel(booster, {"fingerprint": blend.fingerprint(META)}),
                           weight)


def test_a_companion_of_other_records_or_no_companion_at_all_is_refused(booster, tmp_path):
    path = str(tmp_path / "m.lgb.npz")
    _lightgbm(booster, 0.5).save(path)
    other = {**META, "sides": {"train": ["dense/a"]}}
    with pytest.raises(UserError, match="fitted on other records.*costmodel blend m.ckpt`"):
        blend.Companion.load(path, other, "m.ckpt")
    bad = tmp_path / "bad.lgb.npz"
    bad.write_bytes(b"not a zip")
    with pytest.raises(UserError, match="is not a readable store model.*costmodel blend"):
        blend.Companion.load(str(bad), META, "m.ckpt")
    broken = tmp_path / "broken.lgb.npz"
    np.savez(broken, format=1, weight=0.5, model=np.array("tree\nnonsense"),
             info=np.array(json.dumps({"fingerprint": blend.fingerprint(META)})))
    with pytest.raises(UserError, match="LightGBM cannot read its model"):
        blend.Companion.load(str(broken), META, "m.ckpt")
    newer = tmp_path / "newer.lgb.npz"
    np.savez(newer, format=3, weight=0.5, model=np.array(""), info=np.array("{}"))
    with pytest.raises(UserError, match="format 3, this version reads formats 1, 2"):
        blend.Companion.load(str(newer), META, "m.ckpt")
    unpacked = tmp_path / "unpacked.lgb.npz"  # format 2 holds an LZMA stream, not bytes as such
    np.savez(unpacked, format=2, weight=0.5, model=np.frombuffer(b"tree\n", np.uint8),
             info=np.array(json.dumps({"fingerprint": blend.fingerprint(META)})))
    with pytest.raises(UserError, match="is not a readable store model.*not a packed"):
        blend.Companion.load(str(unpacked), META, "m.ckpt")


def test_a_lightgbm_companion_of_the_earlier_layout_still_blends(booster, tmp_path):
    """The layout `costmodel blend` wrote before companions were store models (format 2: the
    model text LZMA-packed, its weight and description), as the shipped GPU model's is."""
    from costmodel import companions

    path = str(tmp_path / "m.lgb.npz")
    info = {"fingerprint": blend.fingerprint(META), "records": 200}
    np.savez_compressed(path, format=2, weight=0.4,
                        model=companions.pack(booster.model_to_string().encode()),
                        info=np.array(json.dumps(info)))
    back = blend.Companion.load(path, META, "m.ckpt")
    assert back.weight == 0.4 and back.info == {"model": "lightgbm", **info}
    assert back.model.model.model_to_string() == booster.model_to_string()
    blend.set_weight(path, 0.7)  # a new weight replaces the old entry
    assert blend.Companion.load(path, META, "m.ckpt").weight == 0.7


def test_packed_payloads_round_trip_whatever_their_kind():
    """Bytes and arrays of 1-, 4- and 8-byte items come back exactly (4-byte arrays, a feature
    matrix and its indices, are packed with their own LZMA2 settings); anything else that is
    handed to `unpack` is refused."""
    from costmodel import companions

    rng = np.random.default_rng(0)
    features = np.round(rng.normal(size=(300, 7)), 2).astype(np.float32)
    for data in (b"{\"trees\": []}", features, np.arange(300, dtype=np.int32),
                 rng.integers(0, 255, 99, dtype=np.uint8), np.arange(5, dtype=np.int64)):
        back = companions.unpack(companions.pack(data))
        assert back == (data.tobytes() if isinstance(data, np.ndarray) else data)
    assert len(companions.pack(features)) < features.nbytes
    for bad in (np.frombuffer(b"not lzma", np.uint8), companions.pack(features)[:-9]):
        with pytest.raises(ValueError, match="packed payload"):
            companions.unpack(bad)


def test_the_companion_lives_beside_its_checkpoint():
    assert blend.beside("checkpoints/graphsage-h100.ckpt") == \
        "checkpoints/graphsage-h100.lgb.npz"


def _xgb_file(path, booster, fingerprint, programs=3, layout="ubj"):
    """A pretrained-XGBModel file as `costmodel.store_models.save_xgb` lays it out (the entries
    the companion reads; `layout` "json" as the files written before UBJSON)."""
    from costmodel import companions

    np.savez_compressed(path, fingerprint=np.array(fingerprint),
                        rows=np.ones(programs, dtype=np.int64),
                        **{f"booster_{layout}": companions.pack(bytes(booster.save_raw(layout)))})


@pytest.fixture(scope="module")
def xgb_booster():
    import xgboost as xgb

    rng = np.random.default_rng(0)
    x = rng.normal(size=(200, 5))
    return xgb.train({"seed": 0, "nthread": 1}, xgb.DMatrix(x, label=x[:, 0]),
                     num_boost_round=5)


@pytest.mark.parametrize("layout", ["ubj", "json"])
def test_a_pretrained_xgbmodel_blends_once_it_holds_a_weight(xgb_booster, booster, tmp_path,
                                                             layout):
    import xgboost as xgb

    path = str(tmp_path / "m.xgb.npz")
    _xgb_file(path, xgb_booster, blend.xgb_fingerprint(META), layout=layout)
    assert blend.Companion.load(path, META, "m.ckpt") is None  # ms-xgb-pretrained's only
    assert blend.load_companion(str(tmp_path / "m.ckpt"), META) is None
    blend.set_weight(path, 0.3)
    with np.load(path, allow_pickle=False) as f:  # the other entries are kept as they were
        assert sorted(f.files) == ["blend_weight", f"booster_{layout}", "fingerprint", "rows"]
    back = blend.load_companion(str(tmp_path / "m.ckpt"), META)
    assert back.name == "xgb" and back.info["scoring_only"]
    assert back.weight == 0.3 and back.path == path and back.fits(META)
    assert not back.fits({**META, "sides": {"train": ["dense/a"]}})
    assert sorted(os.listdir(tmp_path)) == ["m.xgb.npz"]  # no temporary file left
    # XGBModel's score of a program: the sum of its stores' margins
    rows = [np.random.default_rng(1).normal(size=(n, 5)).astype(np.float32) for n in (3, 0, 1)]
    margin = [xgb_booster.predict(xgb.DMatrix(r), output_margin=True).sum() for r in rows[::2]]
    np.testing.assert_allclose(back.throughput(rows), [margin[0], 0.0, margin[1]], rtol=1e-6)
    # a LightGBM companion beside the same checkpoint is the one that blends
    lgb_path = blend.beside(str(tmp_path / "m.ckpt"))
    _lightgbm(booster, 0.5).save(lgb_path)
    assert blend.load_companion(str(tmp_path / "m.ckpt"), META).name == "lightgbm"


def test_a_pretrained_xgbmodel_of_the_earliest_layout_still_loads_and_blends(xgb_booster,
                                                                            tmp_path):
    """The evaluation checkpoints restored from the history come with XGBModel files of the
    first layout (the feature matrix as it is, the booster's own bytes): both readers, the
    tuner's (`load_xgb`) and the blend's (`load_store_model`), take them."""
    import xgboost as xgb

    from costmodel.store_models import load_store_model, load_xgb

    path = str(tmp_path / "m.xgb.npz")
    features = np.random.default_rng(2).normal(size=(4, 5)).astype(np.float32)
    np.savez_compressed(path, fingerprint=np.array(blend.xgb_fingerprint(META)),
                        group_hash=np.array(["g"]), group_size=np.array([2]),
                        rows=np.array([3, 1]), features=features,
                        costs=np.array([1.0, 0.5], np.float32),
                        booster=np.frombuffer(bytes(xgb_booster.save_raw()), np.uint8))
    full = load_xgb(path, blend.xgb_fingerprint(META))
    assert full.data_size == 2 and len(full.data["g"].features) == 2
    assert load_store_model(path).fitted_on["records"] == 2
    blend.set_weight(path, 0.3)
    back = blend.load_companion(str(tmp_path / "m.ckpt"), META)
    assert back.name == "xgb" and back.weight == 0.3 and back.fits(META)
    rows = [features[:3], features[3:]]
    margin = [xgb_booster.predict(xgb.DMatrix(r), output_margin=True).sum() for r in rows]
    np.testing.assert_allclose(back.throughput(rows), margin, rtol=1e-6)


def test_a_pretrained_xgbmodel_of_other_records_or_weight_is_refused(xgb_booster, tmp_path):
    path = str(tmp_path / "m.xgb.npz")
    _xgb_file(path, xgb_booster, "0" * 40)
    blend.set_weight(path, 0.5)
    with pytest.raises(UserError, match="fitted on other records.*costmodel blend m.ckpt "
                       "--with xgb"):
        blend.Companion.load(path, META, "m.ckpt")
    with pytest.raises(UserError, match=r"outside \[0, 1\]"):
        blend.set_weight(path, 1.5)
    _xgb_file(path, xgb_booster, blend.xgb_fingerprint(META))
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files}
    np.savez(path, **arrays, blend_weight=np.float64(-0.1))
    with pytest.raises(UserError, match=r"blend weight -0.1, outside \[0, 1\]"):
        blend.Companion.load(path, META, "m.ckpt")
    np.savez(path, fingerprint=np.array(blend.xgb_fingerprint(META)), rows=np.ones(1),
             booster_json=np.frombuffer(b"{}", np.uint8), blend_weight=np.float64(0.5))
    with pytest.raises(UserError, match="is not a readable store model.*not a packed"):
        blend.Companion.load(path, META, "m.ckpt")
