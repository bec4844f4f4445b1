"""The store view: MetaSchedule's PerStoreFeature of the program, TenSet's input.

One row of `NUM_STORE_FEATURES` hand-made features per store statement (loop annotations,
arithmetic counts, per-buffer access patterns, reuse and arithmetic intensity), extracted from
the scheduled (not yet lowered) module as XGBModel extracts them: the features of TenSet's MLP
and tree models. A graph carries them as `ProgramGraph.store_x` (`Featurizer(stores=True)`);
the model reads each store's row through an MLP, summed over the program's stores (latency adds
up over statements) and log-compressed (`costmodel.model.StoreEncoder`).
"""

from __future__ import annotations

import functools

import numpy as np

from costmodel.lowering import FeaturizeError, _one_line
from costmodel.views import View

# MetaSchedule's PerStoreFeature at XGBModel's settings (5 buffers per store, 10 samples of the
# arithmetic intensity curve): its layout, and the width of its rows
STORE_FEATURES_VERSION = "ms-per-store-feature-5-10"
NUM_STORE_FEATURES = 164


@functools.lru_cache(maxsize=1)
def _store_extractor():
    from tvm.s_tir.meta_schedule.feature_extractor import FeatureExtractor

    return FeatureExtractor.create("per-store-feature")  # XGBModel's default settings


@functools.lru_cache(maxsize=16)
def _store_context(target):
    from tvm.s_tir import meta_schedule as ms

    from datagen.tvm_env import load_tensor_intrinsics

    load_tensor_intrinsics(target.kind.name)  # a TuneContext imports them: only this kind's
    return ms.TuneContext(target=target, num_threads=1)


def store_features(mod, target) -> np.ndarray:
    """MetaSchedule's PerStoreFeature of a scheduled IRModule, as XGBModel extracts it.

    Args:
        mod: a scheduled IRModule (e.g. `Schedule.mod`), not yet lowered.
        target: the `tvm.target.Target` the schedule was made for.

    Raises:
        FeaturizeError: if the extractor rejects the module.

    Shapes:
        output: float32 [stores, NUM_STORE_FEATURES].
    """
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    try:
        [rows] = _store_extractor().extract_from(_store_context(target),
                                                 [ms.MeasureCandidate(s_tir.Schedule(mod), [])])
    except Exception as err:  # noqa: BLE001
        raise FeaturizeError(f"cannot extract store features: {_one_line(err)}") from None
    return rows.numpy().astype(np.float32).reshape(-1, NUM_STORE_FEATURES)


def _encoder(hidden: int, num_store_features: int):
    from costmodel.model import StoreEncoder

    return StoreEncoder(num_store_features, hidden)


STORE = View(
    name="store", order=30, version=STORE_FEATURES_VERSION,
    sizes={"num_store_features": NUM_STORE_FEATURES},
    rows="store_x", statistics=("store_mean", "store_std"), arrays=("store_x",),
    count="store_count", label="store features", key="store_features", flag="stores",
    from_module=lambda mod, target: {"store_x": store_features(mod, target)}, cached=True,
    units=("per store",), verb="extracts", encoder=_encoder, module="store_mlp")
