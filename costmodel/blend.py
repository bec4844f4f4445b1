"""The graph model blended with a tree model at prediction time.

A checkpoint `NAME.ckpt` may have a companion beside it, fitted on exactly the checkpoint's
training records (`costmodel blend` writes it): TenSet's LightGBM (`NAME.lgb.npz`,
`costmodel.store_models.fit_lightgbm`), or MetaSchedule's XGBModel (`NAME.xgb.npz`, the pretrained
model of `ms-xgb-pretrained`), which blends once the file holds a blend weight.
`CostModelPredictor.load` then blends the two (`load_companion`; LightGBM where both are
there): within each workload, the network's predicted log-latencies and the trees' predicted
throughputs are each standardised, averaged (`weight` of the network's, the rest the trees',
in the file), and the result is mapped back onto the network's predictions of that workload
(their mean and spread), so it stays a log-latency of the same scale and ranks as the blend
does.

The two models disagree most about the fastest schedules, where the blend is right more often
than either (on the GPU held-out workloads top-1 0.855 against 0.657 and 0.769). A
standardisation needs a group: a dataset's rows are grouped by workload, a list of schedules
is taken to be candidates of one workload (as a tuner scores them), and a group of one keeps
the network's prediction.

A companion is a store model (`costmodel.store_models`: fit, score, save, load, `fitted_on`)
and its file the store model's (`StoreModel.save`, read back by `load_store_model`, which also
reads the earlier layouts of both files) plus the blend weight: plain arrays only
(`costmodel.companions`), the tree model's own text or JSON LZMA-packed (parsed, never
unpickled), and what it was fitted on, so a file for other records is refused.
"""

from __future__ import annotations

import os

import numpy as np

from costmodel import companions
from datagen.errors import UserError, atomic_path

SUFFIX = companions.LIGHTGBM_SUFFIX
DEFAULT_WEIGHT = 0.5  # of the network; not tuned on any held-out workload


def beside(checkpoint_path: str) -> str:
    """Where the LightGBM model of a checkpoint file lives next to it."""
    return companions.beside(checkpoint_path, SUFFIX)


def xgb_fingerprint(meta: dict) -> str:
    """What the pretrained XGBModel of a checkpoint with this description is fitted on: its
    training workloads, its target and the TVM that extracts its features."""
    import tvm

    return companions.fingerprint(meta, tvm=tvm.__version__)


def fingerprint(meta: dict) -> str:
    """What a companion model of a checkpoint with this description is fitted on: its
    training workloads, its target and the store features' version."""
    from costmodel.featurize import STORE_FEATURES_VERSION

    return companions.fingerprint(meta, store_features=STORE_FEATURES_VERSION)


def standardised(values: np.ndarray, groups: np.ndarray) -> np.ndarray:
    """`values` standardised within each group (mean 0; standard deviation 1, with one degree
    of freedom, where a group's values differ)."""
    out = np.zeros(len(values))
    for g in np.unique(groups):
        idx = groups == g
        v = values[idx]
        std = v.std(ddof=1) if len(v) > 1 else 0.0
        out[idx] = (v - v.mean()) / (std if std > 0 else 1.0)
    return out


def blend(log_seconds: np.ndarray, throughput: np.ndarray, groups, weight: float) -> np.ndarray:
    """The blended log-latency of every program: within each group, `weight` of the network's
    standardised log-latency and 1 - `weight` of the trees' standardised negated throughput,
    mapped back to the network's mean and standard deviation in that group."""
    log_seconds = np.asarray(log_seconds, float)
    if len(log_seconds) == 0:
        return log_seconds
    _, groups = np.unique(np.asarray(groups), return_inverse=True)
    mixed = (weight * standardised(log_seconds, groups)
             + (1 - weight) * standardised(-np.asarray(throughput, float), groups))
    out = np.empty_like(log_seconds)
    for g in np.unique(groups):
        idx = groups == g
        v = log_seconds[idx]
        std = v.std(ddof=1) if len(v) > 1 else 0.0
        out[idx] = v.mean() + (std if std > 0 else 1.0) * mixed[idx]
    return out


def check_weight(weight: float, path: str, hint: str) -> float:
    """`weight`, if a blend weight (in [0, 1]).

    Raises:
        UserError: it is not.
    """
    if not 0.0 <= weight <= 1.0:  # also refuses NaN
        raise UserError(f"{path} has blend weight {weight}, outside [0, 1]; {hint}")
    return weight


TITLES = {"lightgbm": "TenSet's LightGBM", "xgb": "MetaSchedule's XGBModel"}  # by name
WEIGHT = "blend_weight"  # the entry of a companion's file that makes it blend
FINGERPRINTS = {"lightgbm": fingerprint, "xgb": xgb_fingerprint}  # what each was fitted on
SUFFIXES = {"lightgbm": SUFFIX, "xgb": companions.XGB_SUFFIX}  # LightGBM first where both are


class Companion:
    """A store model fitted on a checkpoint's training records (`costmodel.store_models`:
    one of the models that score a program as the sum of its stores' scores), and the blend
    weight. Its file is the store model's, with the weight as one more entry."""

    def __init__(self, model, weight: float, path: str | None = None):
        self.model, self.weight, self.path = model, weight, path

    def __repr__(self) -> str:
        return f"Companion({self.name}, weight={self.weight}, records={self.info.get('records')})"

    def __deepcopy__(self, memo) -> "Companion":
        """A copy with its own weight that shares the fitted model: nothing changes the trees
        once fitted, and MetaSchedule's XGBModel (a TVM object) cannot be deep-copied."""
        return Companion(self.model, self.weight, self.path)

    @property
    def name(self) -> str:
        """The store model it is (`costmodel.store_models.STORE_MODELS`)."""
        return self.model.name

    @property
    def info(self) -> dict:
        """What it was fitted on (`StoreModel.fitted_on`)."""
        return self.model.fitted_on

    def fits(self, meta: dict) -> bool:
        """Whether it was fitted on the training records of a checkpoint described by `meta`."""
        return self.info.get("fingerprint") == FINGERPRINTS[self.name](meta)

    def throughput(self, store_rows: list[np.ndarray]) -> np.ndarray:
        """Predicted throughput (higher is faster) of each program from its per-store rows."""
        return self.model.throughput(store_rows)

    def save(self, path: str) -> None:
        """Write the store model and the weight to `path`, atomically."""
        with atomic_path(path, ".npz") as tmp:
            self.model.save(tmp)
            set_weight(tmp, self.weight)
        self.path = path

    @classmethod
    def load(cls, path: str, meta: dict, checkpoint_path: str,
             weight: float | None = None) -> "Companion | None":
        """The companion in `path` of the checkpoint described by `meta`, or None if the file
        holds no blend weight (a pretrained XGBModel that is only `ms-xgb-pretrained`'s
        model); with `weight`, blending at that weight whatever the file holds (to try
        weights).

        Raises:
            UserError: an unreadable file, or a model fitted on records other than the
                checkpoint's training records.
        """
        from costmodel.store_models import load_store_model

        with_xgb = " --with xgb" if path.endswith(companions.XGB_SUFFIX) else ""
        hint = f"delete it, or write it again with `costmodel blend {checkpoint_path}{with_xgb}`"
        model = load_store_model(path, scoring_only=True, hint=hint)
        if weight is None:
            with np.load(path, allow_pickle=False) as f:
                stored = f[WEIGHT] if WEIGHT in f else f["weight"] if "weight" in f else None
                if stored is None:
                    return None
                weight = float(stored)
        if model.name not in FINGERPRINTS:
            raise UserError(f"{path} holds a {model.name} model, which scores whole programs "
                            f"and does not blend; {hint}")
        companion = cls(model, float(weight), path)
        if not companion.fits(meta):
            raise UserError(f"{path} was fitted on other records than the training records "
                            f"of {checkpoint_path}; {hint}")
        check_weight(companion.weight, path, hint)
        return companion


def set_weight(path: str, weight: float) -> None:
    """Write (or replace) the blend weight in a companion's file, atomically: the checkpoint
    beside it then predicts the blend."""
    check_weight(weight, path, "give the network's share, in [0, 1]")
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files if k not in (WEIGHT, "weight")}
    with atomic_path(path, ".npz") as tmp:
        np.savez_compressed(tmp, **arrays, **{WEIGHT: np.float64(weight)})


def load_companion(checkpoint_path: str, meta: dict) -> Companion | None:
    """The companion a checkpoint blends with: its LightGBM model if there is one, else its
    pretrained XGBModel if that holds a blend weight, else None.

    Raises:
        UserError: a companion file that is unreadable or fitted on other records.
    """
    for suffix in SUFFIXES.values():
        if os.path.isfile(path := companions.beside(checkpoint_path, suffix)):
            return Companion.load(path, meta, checkpoint_path)
    return None
