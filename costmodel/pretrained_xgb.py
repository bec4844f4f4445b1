"""The model of the `ms-xgb-pretrained` baseline: MetaSchedule's XGBModel trained beforehand on
exactly the records a checkpoint was trained on (TenSet's transfer baseline, the fair opponent
of a pretrained cost model).

It is found, in this order: beside the checkpoint (`NAME.xgb.npz` for `NAME.ckpt`; the shipped
checkpoints carry theirs), in the cache folder, or fitted on the checkpoint's training
workloads from its dataset and written to the cache folder. Each file names what it was fitted
on (the training workloads, the target, the TVM version), so a file for other records is never
used. Files hold arrays only (`costmodel.companions`) and load without unpickling
(`costmodel.store_models.load_xgb`). A file beside its checkpoint that also holds a blend weight
(`costmodel blend CHECKPOINT --with xgb`) makes the checkpoint predict the blend of the network
and this model (`costmodel.blend.Companion`).
"""

from __future__ import annotations

import json
import os

from costmodel import blend, companions

SUFFIX = companions.XGB_SUFFIX


fingerprint = blend.xgb_fingerprint  # what a checkpoint's pretrained XGBModel is fitted on


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
    from costmodel.store_models import load_xgb

    fp = fingerprint(meta)
    cached = os.path.join(cache_dir, f"xgb-pretrained-{fp[:16]}{SUFFIX}")
    for path in (beside(checkpoint_path), cached):
        if load_xgb(path, fp) is not None:
            return path
    write_pretrained_xgb(checkpoint_path, meta, cached, dataset, progress)
    return cached


def write_pretrained_xgb(checkpoint_path: str, meta: dict, path: str,
                         dataset: str | None = None, progress: bool = True) -> None:
    """Fit MetaSchedule's XGBModel on the checkpoint's training records (its joint datasets'
    too) and write it to `path`.

    Raises:
        UserError: the training records cannot be found.
    """
    from datagen.tvm_env import make_target
    from costmodel.data_module import trained_records
    from costmodel.store_models import fit_xgb, save_xgb

    frame = trained_records(checkpoint_path, meta, dataset, "the ms-xgb-pretrained baseline")
    model = fit_xgb(frame, make_target(json.loads(meta["target"])), progress=progress)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    save_xgb(model, path, fingerprint(meta))
