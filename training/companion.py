"""`costmodel blend`: fit the LightGBM companion of a checkpoint (`costmodel.blend`).

TenSet's LightGBM baseline (`training.baselines.fit_lightgbm`, seed 0) is fitted on exactly
the records the checkpoint was trained on and written beside it as `NAME.lgb.npz`, where
`CostModelPredictor.load` (so `tune`, `costmodel evaluate`, the MetaSchedule adapters) finds it
and blends its predictions with the network's.
"""

from __future__ import annotations

import json
import os

from costmodel import blend
from costmodel.checkpoint import load as load_checkpoint
from datagen.errors import UserError

LIGHTGBM_SEED = 0


def fit_companion(checkpoint_path: str, dataset: str | None = None,
                  weight: float = blend.DEFAULT_WEIGHT, out: str | None = None,
                  cache_dir: str | None = None, progress: bool = True) -> str:
    """Fit the LightGBM companion of a checkpoint and write it; returns its path.

    Args:
        dataset: the records the checkpoint was trained on (default: the folder it names).
        weight: the network's share of the blend, in [0, 1] (the rest is LightGBM's).
        out: where to write it (default: beside the checkpoint, where it is used).
        cache_dir: a `Featurizer` cache: per-store features found there are not extracted
            again, and those extracted are added.

    Raises:
        UserError: a weight outside [0, 1], an unreadable checkpoint, training records that
            cannot be found, a folder that cannot be written.
    """
    import lightgbm

    from datagen.tvm_env import make_target
    from training.baselines import fit_lightgbm, per_store_features
    from training.data import training_records

    if not 0.0 <= weight <= 1.0:  # also refuses NaN
        raise UserError(f"the blend weight is the network's share, in [0, 1], not {weight}")
    ckpt = load_checkpoint(checkpoint_path)
    out = out or blend.beside(checkpoint_path)
    if not os.access(os.path.dirname(os.path.abspath(out)), os.W_OK):
        raise UserError(f"cannot write {out}: its folder is missing or not writable; "
                        "pass --out FILE somewhere this user can write")
    frame = training_records(checkpoint_path, ckpt.meta, dataset, "the LightGBM companion")
    target = make_target(json.loads(ckpt.meta["target"]))
    features = per_store_features(frame, target, progress, cache_dir=cache_dir)
    booster = fit_lightgbm(frame, target, seed=LIGHTGBM_SEED, features=features)
    info = {"fingerprint": blend.fingerprint(ckpt.meta), "checkpoint": os.path.basename(
        checkpoint_path), "dataset": dataset or ckpt.meta["dataset"], "records": len(frame),
            "workloads": int(frame.workload_key.nunique()), "lightgbm": lightgbm.__version__,
            "seed": LIGHTGBM_SEED}
    blend.LightGBMCompanion(booster, weight, info).save(out)
    return out
