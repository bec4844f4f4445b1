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

The files hold arrays only (`costmodel.companions`): the tree model's own text or JSON,
LZMA-packed (parsed, never unpickled), and what it was fitted on, so a file for other records is
refused.
"""

from __future__ import annotations

import json
import os

import numpy as np

from costmodel import companions
from datagen.errors import UserError, atomic_path

SUFFIX = companions.LIGHTGBM_SUFFIX
DEFAULT_WEIGHT = 0.5  # of the network; not tuned on any held-out workload
FORMAT = 2  # 2: the model text LZMA-packed; 1 (still read): the text as a string array
READS = (1, 2)


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


class Companion:
    """A tree model fitted on a checkpoint's training records, and the blend weight: scores
    each program by the sum of its per-store scores, as both tree baselines do."""

    name = ""  # the baseline it is (`costmodel.store_models.STORE_MODELS`)

    def __init__(self, booster, weight: float, info: dict, path: str | None = None):
        self.booster, self.weight, self.info, self.path = booster, weight, info, path

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(weight={self.weight}, "
                f"records={self.info.get('records')})")

    def fits(self, meta: dict) -> bool:
        """Whether it was fitted on the training records of a checkpoint described by `meta`."""
        raise NotImplementedError

    def store_scores(self, rows: np.ndarray) -> np.ndarray:
        """The model's score of each per-store feature row."""
        raise NotImplementedError

    def throughput(self, store_rows: list[np.ndarray]) -> np.ndarray:
        """Predicted normalised throughput (higher is faster) of each program from its
        per-store feature rows; a program without stores scores 0."""
        ids = np.repeat(np.arange(len(store_rows)), [len(r) for r in store_rows])
        rows = [r for r in store_rows if len(r)]
        if not rows:
            return np.zeros(len(store_rows))
        raw = self.store_scores(np.concatenate(rows))
        return np.bincount(ids, weights=raw, minlength=len(store_rows))


class LightGBMCompanion(Companion):
    """TenSet's LightGBM fitted on a checkpoint's training records, and the blend weight."""

    name = "lightgbm"

    def fits(self, meta: dict) -> bool:
        return self.info.get("fingerprint") == fingerprint(meta)

    def store_scores(self, rows: np.ndarray) -> np.ndarray:
        return self.booster.predict(rows, num_threads=1)

    def save(self, path: str) -> None:
        """Write the model (LightGBM's text format) and its description, atomically."""
        with atomic_path(path, ".npz") as tmp:
            np.savez_compressed(tmp, format=FORMAT, weight=self.weight,
                                model=companions.pack(self.booster.model_to_string().encode()),
                                info=np.array(json.dumps(self.info, sort_keys=True)))
        self.path = path

    @classmethod
    def load(cls, path: str, meta: dict, checkpoint_path: str) -> "LightGBMCompanion":
        """The companion model in `path` of the checkpoint described by `meta`.

        Raises:
            UserError: an unreadable file, another format, or a model fitted on records
                other than the checkpoint's training records.
        """
        import lightgbm as lgb

        hint = (f"delete it, or write it again with `costmodel blend {checkpoint_path}`")
        try:
            with np.load(path, allow_pickle=False) as f:
                version, weight = int(f["format"]), float(f["weight"])
                if version not in READS:
                    raise UserError(f"{path} is format {version}, this version reads formats "
                                    f"{', '.join(map(str, READS))}; {hint}")
                text = (str(f["model"]) if version == 1
                        else companions.unpack(f["model"]).decode())
                info = json.loads(str(f["info"]))
        except (OSError, ValueError, KeyError, UnicodeDecodeError) as err:
            raise UserError(f"{path} is not a LightGBM companion model ({err}); {hint}") \
                from None
        if info.get("fingerprint") != fingerprint(meta):
            raise UserError(f"{path} was fitted on other records than the training records "
                            f"of {checkpoint_path}; {hint}")
        check_weight(weight, path, hint)
        try:
            booster = lgb.Booster(model_str=text)
        except lgb.basic.LightGBMError as err:
            raise UserError(f"{path}: LightGBM cannot read its model ({err}); {hint}") from None
        return cls(booster, weight, info, path)


TITLES = {"lightgbm": "TenSet's LightGBM", "xgb": "MetaSchedule's XGBModel"}  # by `name`
XGB_WEIGHT = "blend_weight"  # the entry of a pretrained XGBModel file that makes it blend


class XGBCompanion(Companion):
    """MetaSchedule's XGBModel pretrained on a checkpoint's training records (the file of
    `ms-xgb-pretrained`, `costmodel.store_models.save_xgb`), with a blend weight written into it by
    `set_xgb_weight`. It scores as XGBModel predicts: each store's margin, summed."""

    name = "xgb"

    def fits(self, meta: dict) -> bool:
        return self.info.get("fingerprint") == xgb_fingerprint(meta)

    def store_scores(self, rows: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        return self.booster.predict(xgb.DMatrix(rows), output_margin=True,
                                    validate_features=False)

    @classmethod
    def load(cls, path: str, meta: dict, checkpoint_path: str,
             weight: float | None = None) -> "XGBCompanion | None":
        """The blending XGBModel in `path`, or None if the file holds no blend weight (it is
        then only `ms-xgb-pretrained`'s model); with `weight`, blending at that weight
        whatever the file holds (to try weights).

        Raises:
            UserError: an unreadable file, or one fitted on records other than the
                checkpoint's training records.
        """
        import xgboost as xgb

        hint = f"delete it, or write it again with `costmodel blend {checkpoint_path} --with xgb`"
        try:
            with np.load(path, allow_pickle=False) as f:
                if weight is None and XGB_WEIGHT not in f:
                    return None
                weight = float(f[XGB_WEIGHT]) if weight is None else float(weight)
                model = companions.unpack(f["booster_json"])
                info = {"fingerprint": str(f["fingerprint"]), "records": int(f["rows"].size)}
            booster = xgb.Booster()
            booster.load_model(bytearray(model))
        except (OSError, ValueError, KeyError, xgb.core.XGBoostError) as err:
            raise UserError(f"{path} is not a pretrained XGBModel ({str(err)[:200]}); {hint}") \
                from None
        if info["fingerprint"] != xgb_fingerprint(meta):
            raise UserError(f"{path} was fitted on other records than the training records "
                            f"of {checkpoint_path}; {hint}")
        check_weight(weight, path, hint)
        booster.set_param({"nthread": 1})
        return cls(booster, weight, info, path)


def set_xgb_weight(path: str, weight: float) -> None:
    """Write (or replace) the blend weight in a pretrained XGBModel file, atomically: the
    checkpoint beside it then predicts the blend."""
    check_weight(weight, path, "give the network's share, in [0, 1]")
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files if k != XGB_WEIGHT}
    with atomic_path(path, ".npz") as tmp:
        np.savez_compressed(tmp, **arrays, **{XGB_WEIGHT: np.float64(weight)})


def load_companion(checkpoint_path: str, meta: dict) -> Companion | None:
    """The companion a checkpoint blends with: its LightGBM model if there is one, else its
    pretrained XGBModel if that holds a blend weight, else None.

    Raises:
        UserError: a companion file that is unreadable or fitted on other records.
    """
    if os.path.isfile(path := beside(checkpoint_path)):
        return LightGBMCompanion.load(path, meta, checkpoint_path)
    if os.path.isfile(path := companions.beside(checkpoint_path, companions.XGB_SUFFIX)):
        return XGBCompanion.load(path, meta, checkpoint_path)
    return None
