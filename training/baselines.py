"""The baseline TVM tunes with today: MetaSchedule's XGBModel on its PerStoreFeature.

It is trained and scored on exactly the records and splits our model gets: each training
workload's records become one `update` of the XGBModel (one feature group per workload, as in
tuning), and predictions are its normalised throughput scores (higher is faster). XGBModel
predicts throughput relative to the best candidate of each workload, not absolute latency,
so it has ranking metrics but no MAPE.

MetaSchedule's MLPModel is not offered: its full training calls `StepLR(..., verbose=...)`, an
argument torch 2.13 no longer has, so it does not train with the torch this project pins.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from datagen.measure import OK
from datagen.sampler import replay
from datagen.tvm_env import load_tensor_intrinsics


def _contexts(frame: pd.DataFrame, target):
    """Yield (workload key, TuneContext, measure candidates, row index) per workload."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    load_tensor_intrinsics(target.kind.name)
    for key, group in frame.groupby("workload_key", sort=True):
        mod = tvm.ir.load_json(group.workload_ir.iloc[0])
        context = ms.TuneContext(mod=mod, target=target, task_name=key, num_threads=1)
        candidates = []
        for trace in group.trace:
            sch = replay(mod, trace)
            candidates.append(ms.MeasureCandidate(
                sch, ArgInfo.from_entry_func(sch.mod, remove_preproc=True)))
        yield key, context, candidates, group.index


def new_xgb(seed: int = 0, adaptive_training: bool = True):
    """MetaSchedule's XGBModel without the warm-up (in tuning it answers at random until it
    has 100 samples); `adaptive_training=False` retrains at every update."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    return XGBModel(config=XGBConfig(seed=seed), num_warmup_samples=0, verbose_eval=0,
                    adaptive_training=adaptive_training)


def fit_xgb(frame: pd.DataFrame, target, seed: int = 0, progress: bool = False):
    """Train MetaSchedule's XGBModel on the successful records of `frame`."""
    from tqdm import tqdm
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    frame = frame[frame.status == OK]
    model = new_xgb(seed)
    last = frame.workload_key.nunique() - 1
    contexts = tqdm(_contexts(frame, target), total=last + 1, unit="workload",
                    desc="XGBModel features", disable=not progress)
    for i, (_, context, candidates, index) in enumerate(contexts):
        results = [RunnerResult([float(x) for x in lat], None)
                   for lat in frame.loc[index, "latencies"]]
        # retrain only when the data grew by a fifth (as in tuning), and always at the end
        model.adaptive_training = i < last
        model.update(context, candidates, results)
    return model


def predict_xgb(model, frame: pd.DataFrame, target) -> pd.Series:
    """XGBModel scores (higher is faster) for every row of `frame`, indexed like it."""
    scores = pd.Series(np.nan, index=frame.index)
    for _, context, candidates, index in _contexts(frame, target):
        scores.loc[index] = np.asarray(model.predict(context, candidates), dtype=float)
    return scores


def save_xgb(model, path: str, fingerprint: str) -> None:
    """Write a trained XGBModel with its training features, in a file `load_xgb` reads
    without unpickling anything (MetaSchedule's own `XGBModel.save` pickles its data).

    `fingerprint` names what it was trained on; `load_xgb` checks it.
    """
    groups = list(model.data.values())
    features = [f for g in groups for f in g.features]
    tmp = f"{path}.tmp-{os.getpid()}.npz"
    try:
        np.savez_compressed(
            tmp, fingerprint=np.array(fingerprint),
            group_hash=np.array([g.group_hash for g in groups]),
            group_size=np.array([len(g.features) for g in groups], dtype=np.int64),
            rows=np.array([f.shape[0] for f in features], dtype=np.int64),
            features=np.concatenate(features).astype(np.float32),
            costs=np.concatenate([np.asarray(g.costs, np.float32) for g in groups]),
            booster=np.frombuffer(bytes(model.booster.save_raw("json")), dtype=np.uint8))
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.remove(tmp)


def load_xgb(path: str, fingerprint: str | None = None, seed: int = 0,
             adaptive_training: bool = True):
    """A trained XGBModel from `save_xgb`'s file, ready to predict and to keep learning.

    Returns None when the file does not exist or was trained on something else than
    `fingerprint` (when given).
    """
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

    if not os.path.isfile(path):
        return None
    with np.load(path, allow_pickle=False) as z:
        if fingerprint is not None and str(z["fingerprint"]) != fingerprint:
            return None
        rows = np.split(z["features"], np.cumsum(z["rows"])[:-1])
        costs = z["costs"]
        sizes = np.cumsum(z["group_size"])[:-1]
        booster = xgb.Booster()
        booster.load_model(bytearray(z["booster"].tobytes()))
        model = new_xgb(seed, adaptive_training)
        for group_hash, feats, cost in zip(z["group_hash"], np.split(np.arange(len(rows)), sizes),
                                           np.split(costs, sizes)):
            model.data[str(group_hash)] = FeatureGroup(str(group_hash),
                                                       [rows[i] for i in feats], cost)
    model.data_size = model.last_train_size = len(rows)
    model.booster = booster
    return model
