"""`costmodel blend`: the tree companion of a checkpoint (`costmodel.blend`).

TenSet's LightGBM (`costmodel.store_models.LightGBMStoreModel`, seed 0) is fitted on exactly
the records the checkpoint was trained on and written beside it as `NAME.lgb.npz`; or
(`--with xgb`) the checkpoint's pretrained XGBModel (`NAME.xgb.npz`, fitted if it is not there
yet, `costmodel.pretrained_xgb`) is given a blend weight. `CostModelPredictor.load` (so `tune`,
`costmodel evaluate`, the MetaSchedule adapters) finds it and blends its predictions with the
network's; a LightGBM companion comes first where both are there.
"""

from __future__ import annotations

import json
import os

from costmodel import blend
from costmodel.checkpoint import load_members
from datagen.errors import UserError

LIGHTGBM_SEED = 0


COMPANIONS = ("lightgbm", "xgb")


def fit_companion(checkpoint_path: str, dataset: str | None = None,
                  weight: float = blend.DEFAULT_WEIGHT, out: str | None = None,
                  cache_dir: str | None = None, progress: bool = True,
                  model: str = "lightgbm") -> str:
    """Fit the tree companion of a checkpoint and write it; returns its path.

    Args:
        dataset: the records the checkpoint was trained on (default: the folder it names).
        weight: the network's share of the blend, in [0, 1] (the rest is the trees').
        out: where to write it (default: beside the checkpoint, where it is used).
        cache_dir: a `Featurizer` cache: per-store features found there are not extracted
            again, and those extracted are added (LightGBM's; XGBModel extracts its own).
        model: "lightgbm", or "xgb": the pretrained XGBModel, kept if one fitted on these
            records is at `out` already, and given the weight.

    Raises:
        UserError: a weight outside [0, 1], an unreadable checkpoint, training records that
            cannot be found, a folder that cannot be written.
    """
    from costmodel.store_models import LightGBMStoreModel, load_xgb, per_store_features
    from datagen.tvm_env import make_target
    from costmodel import pretrained_xgb
    from costmodel.data_module import trained_records

    if model not in COMPANIONS:
        raise UserError(f"no companion model {model!r}; choose one of {', '.join(COMPANIONS)}")
    if not 0.0 <= weight <= 1.0:  # also refuses NaN
        raise UserError(f"the blend weight is the network's share, in [0, 1], not {weight}")
    ckpt = load_members(checkpoint_path)[0]  # one network or a packed ensemble: one description
    out = out or (pretrained_xgb.beside(checkpoint_path) if model == "xgb"
                  else blend.beside(checkpoint_path))
    if not os.access(os.path.dirname(os.path.abspath(out)), os.W_OK):
        raise UserError(f"cannot write {out}: its folder is missing or not writable; "
                        "pass --out FILE somewhere this user can write")
    if model == "xgb":
        if load_xgb(out, pretrained_xgb.fingerprint(ckpt.meta)) is None:
            pretrained_xgb.write_pretrained_xgb(checkpoint_path, ckpt.meta, out, dataset,
                                                progress)
        blend.set_weight(out, weight)
        return out
    frame = trained_records(checkpoint_path, ckpt.meta, dataset, "the LightGBM companion")
    target = make_target(json.loads(ckpt.meta["target"]))
    features = per_store_features(frame, target, progress, cache_dir=cache_dir)
    model = LightGBMStoreModel.fit(frame, target, seed=LIGHTGBM_SEED, features=features)
    model.fitted_on.update(fingerprint=blend.fingerprint(ckpt.meta),
                           checkpoint=os.path.basename(checkpoint_path),
                           dataset=dataset or ckpt.meta["dataset"])
    blend.Companion(model, weight).save(out)
    return out
