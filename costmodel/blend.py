"""The graph model blended with TenSet's LightGBM at prediction time.

A checkpoint `NAME.ckpt` may have `NAME.lgb.npz` beside it: TenSet's LightGBM baseline
(`training.baselines.fit_lightgbm`) fitted on exactly the checkpoint's training records
(`costmodel blend` writes it). `CostModelPredictor.load` then blends the two: within each
workload, the network's predicted log-latencies and LightGBM's predicted throughputs are each
standardised, averaged (`weight` of the network's, the rest LightGBM's, in the file), and the
result is mapped back onto the network's predictions of that workload (their mean and
spread), so it stays a log-latency of the same scale and ranks as the blend does.

The two models disagree most about the fastest schedules, where the blend is right more often
than either (on the GPU held-out workloads top-1 0.855 against 0.657 and 0.769). A
standardisation needs a group: a dataset's rows are grouped by workload, a list of schedules
is taken to be candidates of one workload (as a tuner scores them), and a group of one keeps
the network's prediction.

The file holds arrays only (`costmodel.companions`): LightGBM's own text model, LZMA-packed
(parsed, never unpickled), and a JSON description that says what it was fitted on, so a file
for other records is refused.
"""

from __future__ import annotations

import json

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
    standardised log-latency and 1 - `weight` of LightGBM's standardised negated throughput,
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


class LightGBMCompanion:
    """A LightGBM model fitted on a checkpoint's training records, and the blend weight."""

    def __init__(self, booster, weight: float, info: dict, path: str | None = None):
        self.booster, self.weight, self.info, self.path = booster, weight, info, path

    def __repr__(self) -> str:
        return f"LightGBMCompanion(weight={self.weight}, records={self.info.get('records')})"

    def throughput(self, store_rows: list[np.ndarray]) -> np.ndarray:
        """Predicted normalised throughput (higher is faster) of each program from its
        per-store feature rows; a program without stores scores 0."""
        ids = np.repeat(np.arange(len(store_rows)), [len(r) for r in store_rows])
        rows = [r for r in store_rows if len(r)]
        if not rows:
            return np.zeros(len(store_rows))
        raw = self.booster.predict(np.concatenate(rows), num_threads=1)
        return np.bincount(ids, weights=raw, minlength=len(store_rows))

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
        if not 0.0 <= weight <= 1.0:
            raise UserError(f"{path} has blend weight {weight}, outside [0, 1]; {hint}")
        try:
            booster = lgb.Booster(model_str=text)
        except lgb.basic.LightGBMError as err:
            raise UserError(f"{path}: LightGBM cannot read its model ({err}); {hint}") from None
        return cls(booster, weight, info, path)
