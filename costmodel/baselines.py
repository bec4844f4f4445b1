"""Baselines: the cost models on MetaSchedule's PerStoreFeature (`costmodel.store_models`:
MetaSchedule's XGBModel, TenSet's LightGBM and MLP), fitted and scored on exactly the records
and splits our model gets, by name in `BASELINES`.

A baseline is (train frame, test frame, tvm target, seeds, cache_dir) -> for each seed, the
scores (higher is faster) of the test rows by a model of that name fitted on the train rows
with that seed. Per-store features are extracted once for all seeds (or read from a
`Featurizer` cache, `cache_dir`); XGBModel extracts its own, as it does when tuning.
"""

from __future__ import annotations

import numpy as np
import pandas as pd

from costmodel.registry import Registry
from costmodel.store_models import STORE_MODELS, per_store_features
from datagen.measure import OK

BASELINES = Registry("baseline")


def _baseline(name: str):
    def score(train: pd.DataFrame, test: pd.DataFrame, target, seeds: list[int],
              cache_dir: str | None = None) -> list[np.ndarray]:
        model = STORE_MODELS.get(name)
        train = train[train.status == OK]
        features = [None, None] if name == "xgb" else \
            [per_store_features(f, target, cache_dir=cache_dir) for f in (train, test)]
        return [model.fit(train, target, seed=s, features=features[0]).score(
            test, features[1]).to_numpy() for s in seeds]

    score.__doc__ = (f"The {name!r} store model fitted on `train` once per seed: its scores "
                     "of the `test` rows.")
    return score


for _name in STORE_MODELS.names():
    BASELINES.register(_name)(_baseline(_name))
