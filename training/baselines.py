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


def fit_xgb(frame: pd.DataFrame, target, seed: int = 0):
    """Train MetaSchedule's XGBModel on the successful records of `frame`."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig
    from tvm.s_tir.meta_schedule.runner import RunnerResult

    frame = frame[frame.status == OK]
    # no warm-up: in tuning XGBModel answers at random until it has 100 samples
    model = XGBModel(config=XGBConfig(seed=seed), num_warmup_samples=0, verbose_eval=0)
    last = frame.workload_key.nunique() - 1
    for i, (_, context, candidates, index) in enumerate(_contexts(frame, target)):
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
