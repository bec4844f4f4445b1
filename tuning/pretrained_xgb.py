"""The model of the `ms-xgb-pretrained` baseline: MetaSchedule's XGBModel trained beforehand on
exactly the records a checkpoint was trained on (TenSet's transfer baseline, the fair opponent
of a pretrained cost model).

It is found, in this order: beside the checkpoint (`NAME.xgb.npz` for `NAME.ckpt`; the shipped
checkpoints carry theirs), in the cache folder, or fitted on the checkpoint's training
workloads from its dataset and written to the cache folder. Each file names what it was fitted
on (the training workloads, the target, the TVM version), so a file for other records is never
used. Files hold arrays only (`costmodel.companions`) and load without unpickling
(`training.baselines.load_xgb`).
"""

from __future__ import annotations

import json
import os

from costmodel import companions

SUFFIX = companions.XGB_SUFFIX


def fingerprint(meta: dict) -> str:
    """What a pretrained XGBModel for a checkpoint with this description is fitted on."""
    import tvm

    return companions.fingerprint(meta, tvm=tvm.__version__)


def beside(checkpoint_path: str) -> str:
    """Where the pretrained model of a checkpoint file lives next to it."""
    return companions.beside(checkpoint_path, SUFFIX)


def pretrained_xgb_file(checkpoint_path: str, meta: dict, cache_dir: str,
                        dataset: str | None = None, progress: bool = True) -> str:
    """A file with the XGBModel pretrained on the checkpoint's training records.

    Args:
        checkpoint_path: the checkpoint (its first member, for an ensemble).
        meta: its description (training workloads, target, dataset).
        cache_dir: where a model fitted here is kept for the next run.
        dataset: the records it was trained on (default: the folder the checkpoint names).

    Raises:
        UserError: no file fits and the training records cannot be found.
    """
    from training.baselines import fit_xgb, load_xgb, save_xgb
    from training.data import training_records

    fp = fingerprint(meta)
    cached = os.path.join(cache_dir, f"xgb-pretrained-{fp[:16]}{SUFFIX}")
    for path in (beside(checkpoint_path), cached):
        if load_xgb(path, fp) is not None:
            return path
    frame = training_records(checkpoint_path, meta, dataset, "the ms-xgb-pretrained baseline")
    from datagen.tvm_env import make_target

    model = fit_xgb(frame, make_target(json.loads(meta["target"])), progress=progress)
    os.makedirs(cache_dir, exist_ok=True)
    save_xgb(model, cached, fp)
    return cached
