"""Cost models on MetaSchedule's PerStoreFeature, one interface for all of them: the field's
tree models and TenSet's MLP, by name in `STORE_MODELS`.

    model = STORE_MODELS.get("lightgbm").fit(train_frame, target, seed=0)
    scores = model.score(test_frame)            # one per row, higher is faster
    model.save("lightgbm.npz")
    same = load_store_model("lightgbm.npz")     # arrays only: nothing in the file runs
    same.fitted_on                              # records, workloads, target, seed, versions

- "xgb": the baseline TVM tunes with today, MetaSchedule's XGBModel, fitted on exactly the
  records our model gets: each workload's records become one `update` of the XGBModel (one
  feature group per workload, as in tuning), and its scores are its normalised throughput
  (higher is faster). Its file is the one `ms-xgb-pretrained` tunes with (`save_xgb`).
- "lightgbm": TenSet's second tree baseline (`LGBModel`): a LightGBM regressor on the same
  PerStoreFeature rows, with TenSet's target and loss: the normalised throughput of each
  program (its workload's best latency over its own), predicted as the sum of per-store
  scores and fitted with squared error on that sum ("pack-sum"), with TenSet's
  hyperparameters. TenSet's optional operator-tag embedding is left out, so both tree models
  see the same features.
- "mlp": TenSet's MLP cost model (`MLPModelInternal`, trained from scratch), rewritten here in
  plain torch: each store's PerStoreFeature row (each column over its maximum on the training
  rows) through a two-layer MLP, summed per program, two residual layers and a linear head;
  trained with TenSet's LambdaRank loss on the normalised throughput of batches of 512
  programs, with its optimiser, epochs, gradient clipping and early stop. Without its optional
  workload embedding, as for LightGBM.

All three score throughput relative to the best candidate of each workload, not absolute
latency, so they have ranking metrics but no MAPE. The graph network has the same interface
(`costmodel.predictor.CostModelPredictor`: `fit`, `score`, `save`, `load`, `fitted_on`), and
so has its blend with one of these (`CostModelPredictor.fit(..., blend_with="lightgbm")`);
`train fit` trains it with the full set of options (splits, joint datasets, several devices).

MetaSchedule's own MLPModel is not offered: its full training calls `StepLR(..., verbose=...)`,
an argument torch 2.13 no longer has, so it does not train with the torch this project pins.
"""

from __future__ import annotations

import json
import os
import zipfile

import numpy as np
import pandas as pd
import torch
from torch import nn

from costmodel import companions
from costmodel.registry import Registry
from datagen.errors import UserError, atomic_path
from datagen.measure import OK
from datagen.sampler import replay
from datagen.tvm_env import load_tensor_intrinsics

STORE_MODELS = Registry("store model")  # by name: the StoreModel classes below
KIND, FITTED_ON = "kind", "fitted_on"  # the entries of a saved model that say what it is
# TenSet's LGBModelInternal hyperparameters and its 2000 rounds; TenSet's train_model.py
# stopped early on its test set, which would peek at the held-out side, so all rounds run
LIGHTGBM_PARAMS = {"boosting_type": "gbdt", "num_leaves": 72, "learning_rate": 0.1632095,
                   "feature_fraction": 0.84375, "bagging_fraction": 0.89435, "bagging_freq": 4,
                   "min_sum_hessian_in_leaf": 4}
LIGHTGBM_ROUNDS = 2000
# one thread: reproducible, and on 2 cores two OpenMP threads trained 15 times slower
LIGHTGBM_THREADS = 1
# LightGBM's default leaf size (TenSet kept it); smaller for training sets of fewer than
# 20 * 20 store rows, where it would leave no feature to split on
LIGHTGBM_MIN_DATA_IN_LEAF = 20
# TenSet's MLPModelInternal with the LambdaRank loss it defaults to (its StepLR has gamma 1: a
# constant learning rate); training stops early when the moving average of the training loss
# has not improved for a sixth of the epochs
TENSET_MLP = {"hidden": 256, "lr": 7e-4, "weight_decay": 1e-6, "epochs": 50, "batch_size": 512,
              "grad_clip": 0.5, "predict_batch_size": 4096}


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


def new_xgb(seed: int = 0, adaptive_training: bool = True, threads: int | None = None):
    """MetaSchedule's XGBModel without the warm-up (in tuning it answers at random until it
    has 100 samples); `adaptive_training=False` retrains at every update; `threads`: XGBoost's
    (None: MetaSchedule's default, the host's physical cores)."""
    from tvm.s_tir.meta_schedule.cost_model import XGBModel
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import XGBConfig

    return XGBModel(config=XGBConfig(seed=seed), num_warmup_samples=0, verbose_eval=0,
                    adaptive_training=adaptive_training, num_tuning_cores=threads)


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
        # the record's label (the median of its steadier measurement), as our model learns it
        results = [RunnerResult([float(lat)], None)
                   for lat in frame.loc[index, "latency_median"]]
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


def save_xgb(model, path: str, fingerprint: str, fitted_on: dict | None = None) -> None:
    """Write a trained XGBModel with its training features, in a file `load_xgb` reads
    without unpickling anything (MetaSchedule's own `XGBModel.save` pickles its data).

    `fingerprint` names what it was trained on; `load_xgb` checks it (`fitted_on`, if given,
    is written beside it for `load_store_model`). The booster (XGBoost's binary JSON, UBJSON:
    a sixth smaller packed than its JSON) and the distinct feature rows are LZMA-packed
    (`costmodel.companions.pack`), each program's rows stored as indices into them: about half
    the size of the plain arrays deflated.
    """
    pack = companions.pack
    groups = list(model.data.values())
    features = [f for g in groups for f in g.features]
    matrix = np.concatenate(features).astype(np.float32)
    distinct, index = np.unique(matrix, axis=0, return_inverse=True)
    with atomic_path(path, ".npz") as tmp:
        np.savez_compressed(
            tmp, fingerprint=np.array(fingerprint),
            group_hash=np.array([g.group_hash for g in groups]),
            group_size=np.array([len(g.features) for g in groups], dtype=np.int64),
            rows=np.array([f.shape[0] for f in features], dtype=np.int64),
            distinct_shape=np.array(distinct.shape, dtype=np.int64),
            distinct_features=pack(distinct), feature_index=pack(index.astype(np.int32)),
            costs=np.concatenate([np.asarray(g.costs, np.float32) for g in groups]),
            booster_ubj=pack(bytes(model.booster.save_raw("ubj"))),
            **({} if fitted_on is None else {KIND: np.array("xgb"),
                                             FITTED_ON: np.array(json.dumps(fitted_on))}))


def _stored_features(z) -> np.ndarray:
    """The [rows, features] float32 matrix of a `save_xgb` file (or of the earlier layout,
    the matrix itself and the booster unpacked)."""
    if "features" in z:
        return z["features"]
    shape = tuple(int(n) for n in z["distinct_shape"])
    distinct = np.frombuffer(companions.unpack(z["distinct_features"]), dtype=np.float32)
    index = np.frombuffer(companions.unpack(z["feature_index"]), dtype=np.int32)
    if distinct.size != shape[0] * shape[1] or (index.size and index.max() >= shape[0]):
        raise ValueError("its feature arrays disagree in size")
    return distinct.reshape(shape)[index]


BOOSTER_KEYS = ("booster_ubj", "booster_json", "booster")  # newest layout first


def _booster_bytes(z) -> bytearray:
    """The booster of a `save_xgb` file: LZMA-packed UBJSON, or LZMA-packed JSON (the files
    before it), or in the earliest layout (files of the evaluation checkpoints in the history)
    XGBoost's own bytes as they are. XGBoost tells JSON from UBJSON by itself."""
    for key in BOOSTER_KEYS[:2]:
        if key in z:
            return bytearray(companions.unpack(z[key]))
    return bytearray(z["booster"].tobytes())


def load_xgb(path: str, fingerprint: str | None = None, seed: int = 0,
             adaptive_training: bool = True, threads: int | None = None):
    """A trained XGBModel from `save_xgb`'s file, ready to predict and to keep learning.

    Returns None when the file does not exist or was trained on something else than
    `fingerprint` (when given).

    Raises:
        UserError: the file is not one `save_xgb` wrote.
    """
    import xgboost as xgb
    from tvm.s_tir.meta_schedule.cost_model.xgb_model import FeatureGroup

    if not os.path.isfile(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as z:
            if fingerprint is not None and str(z["fingerprint"]) != fingerprint:
                return None
            rows = np.split(_stored_features(z), np.cumsum(z["rows"])[:-1])
            costs = z["costs"]
            sizes = np.cumsum(z["group_size"])[:-1]
            booster = xgb.Booster()
            booster.load_model(_booster_bytes(z))
            hashes = [str(h) for h in z["group_hash"]]
    except (OSError, ValueError, KeyError, xgb.core.XGBoostError) as err:
        raise UserError(f"{path} is not a pretrained XGBModel file ({str(err)[:200]}); delete "
                        "it and it is fitted again from the checkpoint's dataset") from None
    model = new_xgb(seed, adaptive_training, threads)
    for group_hash, feats, cost in zip(hashes, np.split(np.arange(len(rows)), sizes),
                                       np.split(costs, sizes)):
        model.data[group_hash] = FeatureGroup(group_hash, [rows[i] for i in feats], cost)
    model.data_size = model.last_train_size = len(rows)
    model.booster = booster
    return model


def per_store_features(frame: pd.DataFrame, target, progress: bool = False,
                       cache_dir: str | None = None) -> list[np.ndarray]:
    """MetaSchedule's PerStoreFeature of every row of `frame`, in its order, extracted as
    XGBModel extracts them (`costmodel.featurize.store_features`: one [stores, features]
    float32 array per program).

    Args:
        cache_dir: a `Featurizer` cache folder: a record whose store features it already
            holds (under its `trace_hash`) is read from there (plain arrays, nothing unpickled)
            instead of lowered again; one it does not hold is added.
    """
    import tvm
    from tqdm import tqdm

    from costmodel.featurize import record_key, save_rows, store_features
    from costmodel.views import STORE

    cached = STORE.folder(cache_dir, target.kind.name) if cache_dir else None
    hashes = frame.trace_hash if cached is not None else [None] * len(frame)
    workloads, prefixes = {}, {}
    features = []
    for key, workload_ir, trace, trace_hash in tqdm(
            zip(frame.workload_key, frame.workload_ir, frame.trace, hashes), total=len(frame),
            unit="rec", desc="PerStoreFeature", disable=not progress):
        path = None
        if trace_hash:  # the Featurizer's cache key: a digest of the workload, the trace hash
            if key not in prefixes:
                prefixes[key] = record_key(workload_ir, "")
            if (path := cached / f"{prefixes[key]}{trace_hash}.npy").exists():
                features.append(np.load(path, allow_pickle=False))
                continue
        if key not in workloads:
            workloads[key] = tvm.ir.load_json(workload_ir)
        features.append(store_features(replay(workloads[key], trace).mod, target))
        if path is not None:
            save_rows(path, features[-1])
    return features


def normalised_throughput(frame: pd.DataFrame) -> np.ndarray:
    """TenSet's label of every row: its workload's best latency over its own (1 for the
    fastest, higher is faster)."""
    cost = frame.latency_median.astype(float)
    return (cost.groupby(frame.workload_key).transform("min") / cost).to_numpy()


def _pack(features: list[np.ndarray]) -> tuple[np.ndarray, np.ndarray]:
    """The rows of all programs stacked, and the program (pack) each row belongs to."""
    ids = np.repeat(np.arange(len(features)), [len(f) for f in features])
    width = next((f.shape[1] for f in features if len(f)), 0)
    rows = [f for f in features if len(f)]
    return (np.concatenate(rows) if rows else np.zeros((0, width), np.float32)), ids


def fit_lightgbm(frame: pd.DataFrame, target, seed: int = 0, progress: bool = False,
                 features: list[np.ndarray] | None = None):
    """TenSet's LightGBM baseline trained on the successful records of `frame`.

    The label of a program is its normalised throughput, min latency of its workload / its
    latency (its record's label, `latency_median`, as our model and XGBModel take it); the model scores each
    store and a program's prediction is the sum over its stores, fitted with squared error
    on that sum. Programs without stores are left out, as XGBModel leaves them out.

    Args:
        features: `per_store_features` of `frame`'s successful records, if already at hand.

    Returns:
        a `lightgbm.Booster` for `predict_lightgbm`.
    """
    import lightgbm as lgb

    frame = frame[frame.status == OK]
    throughput = normalised_throughput(frame)
    if features is None:
        features = per_store_features(frame, target, progress)
    keep = np.array([len(f) > 0 for f in features])
    x, ids = _pack([f for f, k in zip(features, keep) if k])
    y = throughput[keep]

    def pack_sum(raw):
        return np.bincount(ids, weights=raw, minlength=len(y))

    def squared_error(raw, _data):  # gradient and hessian of 1/2 (sum of the pack - y)^2
        grad = (pack_sum(raw) - y)[ids]
        return grad, np.ones_like(grad)

    params = {**LIGHTGBM_PARAMS, "objective": squared_error, "metric": "None", "seed": seed,
              "deterministic": True, "force_row_wise": True, "num_threads": LIGHTGBM_THREADS,
              "min_data_in_leaf": max(1, min(LIGHTGBM_MIN_DATA_IN_LEAF, len(x) // 20)),
              "verbosity": -1}
    return lgb.train(params, lgb.Dataset(x, label=y[ids]), num_boost_round=LIGHTGBM_ROUNDS)


def predict_lightgbm(booster, frame: pd.DataFrame, target,
                     features: list[np.ndarray] | None = None) -> pd.Series:
    """LightGBM scores (predicted normalised throughput, higher is faster) for every row of
    `frame`, indexed like it (`features`: its `per_store_features`, if at hand); a program
    without stores scores 0."""
    x, ids = _pack(per_store_features(frame, target) if features is None else features)
    raw = booster.predict(x) if len(x) else np.zeros(0)
    return pd.Series(np.bincount(ids, weights=raw, minlength=len(frame)), index=frame.index)


def quantised(matrix: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """`matrix` as int8 and a float32 scale per row (its largest magnitude over 127): each
    value within half a step of the row's scale."""
    row_scale = np.abs(matrix).max(axis=1) / 127
    row_scale = np.where(row_scale > 0, row_scale, 1.0).astype(np.float32)
    q = np.clip(np.rint(matrix / row_scale[:, None]), -127, 127).astype(np.int8)
    return q, row_scale


class SegmentSumMLP(nn.Module):
    """TenSet's MLP: every store row through a two-layer MLP, summed per program, two residual
    layers and a linear head; one score per program (higher is faster)."""

    def __init__(self, in_dim: int, hidden: int = TENSET_MLP["hidden"]):
        super().__init__()
        self.encoder = nn.Sequential(nn.Linear(in_dim, hidden), nn.ReLU(),
                                     nn.Linear(hidden, hidden), nn.ReLU())
        self.residual = nn.ModuleList(nn.Sequential(nn.Linear(hidden, hidden), nn.ReLU())
                                      for _ in range(2))
        self.head = nn.Linear(hidden, 1)

    def forward(self, rows: torch.Tensor, program: torch.Tensor, programs: int) -> torch.Tensor:
        """Scores of `programs` programs; `program[i]` is the program of store row i.

        Shapes:
            rows: [stores, in_dim]; program: [stores]; output: [programs].
        """
        hidden = self.encoder(rows)
        out = hidden.new_zeros(programs, hidden.shape[1]).index_add_(0, program, hidden)
        for layer in self.residual:
            out = layer(out) + out
        return self.head(out).squeeze(-1)


def tenset_lambdarank_loss(pred: torch.Tensor, label: torch.Tensor,
                           eps: float = 1e-10) -> torch.Tensor:
    """TenSet's LambdaRank loss of one batch, taken as one list (TenSet mixes workloads in a
    batch; the labels, normalised throughputs, are 1 for each workload's fastest).

    Ordered by prediction, every pair (i, j) whose labels say i is faster than j adds
    -w_ij log2 sigmoid(s_i - s_j) (at most -log2 eps), with w_ij = |1/D_i - 1/D_j| |G_i - G_j|:
    the NDCG discount D = log2(1 + position) and gain G = (2^label - 1) / ideal DCG.
    """
    order = pred.argsort(descending=True)
    scores, gains = pred[order], label[order]
    discount = torch.log2(torch.arange(2, len(pred) + 2, dtype=pred.dtype, device=pred.device))
    ideal = ((2 ** label.sort(descending=True).values - 1) / discount).sum().clamp(min=eps)
    gain = (2 ** gains.clamp(min=0) - 1) / ideal
    weight = (1 / discount[:, None] - 1 / discount[None, :]).abs() \
        * (gain[:, None] - gain[None, :]).abs()
    diff = (scores[:, None] - scores[None, :]).clamp(-1e8, 1e8)
    pair_loss = (weight * torch.log2(torch.sigmoid(diff).clamp(min=eps))).clamp(min=np.log2(eps))
    return -pair_loss[gains[:, None] > gains[None, :]].sum()


def _batch(x: torch.Tensor, starts: np.ndarray, counts: np.ndarray, programs: np.ndarray):
    """The store rows of `programs` (indices into the packed programs) and their program ids
    within the batch."""
    index = np.concatenate([np.arange(starts[p], starts[p] + counts[p]) for p in programs])
    ids = np.repeat(np.arange(len(programs)), counts[programs])
    return x[torch.from_numpy(index)], torch.from_numpy(ids)


def fit_tenset_mlp(frame: pd.DataFrame, target, seed: int = 0, progress: bool = False,
                   features: list[np.ndarray] | None = None, cache_dir: str | None = None):
    """TenSet's MLP baseline trained on the successful records of `frame` (labels as for
    LightGBM: each program's normalised throughput); programs without stores are left out.

    Returns:
        (the `SegmentSumMLP`, the per-column divisors of its input) for `predict_tenset_mlp`.
    """
    from tqdm import tqdm

    frame = frame[frame.status == OK]
    throughput = normalised_throughput(frame)
    if features is None:
        features = per_store_features(frame, target, progress, cache_dir)
    keep = [i for i, f in enumerate(features) if len(f)]
    x, _ = _pack([features[i] for i in keep])
    scale = np.where(x.max(axis=0) > 0, x.max(axis=0), 1).astype(np.float32)
    x = torch.from_numpy(x / scale)
    labels = torch.tensor(throughput[keep], dtype=torch.float32)
    counts = np.array([len(features[i]) for i in keep])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]])
    hp = TENSET_MLP
    torch.manual_seed(seed)
    net = SegmentSumMLP(x.shape[1], hp["hidden"])
    optimizer = torch.optim.Adam(net.parameters(), lr=hp["lr"], weight_decay=hp["weight_decay"])
    shuffle = np.random.default_rng(seed)
    average, best, best_epoch = None, float("inf"), 0
    for epoch in tqdm(range(hp["epochs"]), unit="epoch", desc="TenSet MLP", disable=not progress):
        net.train()
        order = shuffle.permutation(len(keep))
        for start in range(0, len(order), hp["batch_size"]):
            programs = order[start:start + hp["batch_size"]]
            rows, ids = _batch(x, starts, counts, programs)
            loss = tenset_lambdarank_loss(net(rows, ids, len(programs)),
                                          labels[torch.from_numpy(programs)])
            optimizer.zero_grad()
            loss.backward()
            nn.utils.clip_grad_norm_(net.parameters(), hp["grad_clip"])
            optimizer.step()
            average = loss.item() if average is None else 0.95 * average + 0.05 * loss.item()
        if average < best:
            best, best_epoch = average, epoch
        elif epoch - best_epoch >= hp["epochs"] // 6:
            break
    return net.eval(), scale


def predict_tenset_mlp(model, frame: pd.DataFrame, target,
                       features: list[np.ndarray] | None = None,
                       cache_dir: str | None = None) -> pd.Series:
    """TenSet MLP scores (higher is faster) for every row of `frame`, indexed like it."""
    net, scale = model
    if features is None:
        features = per_store_features(frame, target, cache_dir=cache_dir)
    x, _ = _pack(features)
    x = torch.from_numpy(x / scale)
    counts = np.array([len(f) for f in features])
    starts = np.concatenate([[0], np.cumsum(counts)[:-1]]) if len(counts) else counts
    scores = []
    with torch.no_grad():
        for start in range(0, len(features), TENSET_MLP["predict_batch_size"]):
            programs = np.arange(start, min(start + TENSET_MLP["predict_batch_size"],
                                            len(features)))
            rows, ids = _batch(x, starts, counts, programs)
            scores.append(net(rows, ids, len(programs)).numpy())
    return pd.Series(np.concatenate(scores) if scores else np.zeros(0), index=frame.index,
                     dtype=float)


class StoreModel:
    """A cost model on PerStoreFeature rows, fitted on dataset records in one call.

    `fit` (a classmethod) fits one on the successful records of a frame, `score` scores rows
    of a frame (higher is faster, comparable within a workload), `save` writes it to a NumPy
    archive of plain arrays that `load_store_model` reads back, and `fitted_on` says what it
    was fitted on (records, workloads, target, seed, library versions). `features`, where a
    method takes it, is the frame's `per_store_features` already at hand (extracted once for
    several fits); `cache_dir` a `Featurizer` cache to read them from instead.
    """

    name = ""

    def __init__(self, model, fitted_on: dict, target=None):
        self.model, self.fitted_on, self._target = model, fitted_on, target

    def __repr__(self) -> str:
        return (f"{type(self).__name__}(records={self.fitted_on.get('records')}, "
                f"workloads={self.fitted_on.get('workloads')})")

    @property
    def target(self):
        """The `tvm.target.Target` it was fitted for (features are extracted for it)."""
        from datagen.tvm_env import make_target

        if self._target is None:
            self._target = make_target(json.loads(self.fitted_on["target"]))
        return self._target

    @classmethod
    def fit(cls, frame: pd.DataFrame, target, seed: int = 0, progress: bool = False,
            features: list[np.ndarray] | None = None, cache_dir: str | None = None
            ) -> "StoreModel":
        """Fit one on the successful records of `frame` (`features`: theirs, in order)."""
        from datagen.tvm_env import target_json

        ok = (frame.status == OK).to_numpy()
        if features is not None:
            if len(features) != len(frame):
                raise ValueError(f"{len(features)} feature arrays for {len(frame)} records")
            features = [f for f, keep in zip(features, ok) if keep]
        frame = frame[ok]
        if frame.empty:
            raise UserError(f"no successfully measured record to fit the {cls.name} model on")
        model = cls._fit(frame, target, seed, progress, features, cache_dir)
        return cls(model, {"model": cls.name, "records": len(frame),
                           "workloads": int(frame.workload_key.nunique()),
                           "target": target_json(target), "seed": seed, **cls._settings()},
                   target)

    def score(self, frame: pd.DataFrame, features: list[np.ndarray] | None = None,
              cache_dir: str | None = None) -> pd.Series:
        """Its score of every row of `frame` (higher is faster), indexed like it."""
        raise NotImplementedError

    def store_scores(self, rows: np.ndarray) -> np.ndarray:
        """Its score of each per-store feature row, for a model that scores a program as the
        sum of its stores' scores (the tree models; not the MLP, which sums inside)."""
        raise NotImplementedError(f"the {self.name} model scores whole programs, not stores")

    def throughput(self, store_rows: list[np.ndarray]) -> np.ndarray:
        """Its score of each program (higher is faster) from the program's per-store feature
        rows, the sum of `store_scores`; a program without stores scores 0."""
        ids = np.repeat(np.arange(len(store_rows)), [len(r) for r in store_rows])
        rows = [r for r in store_rows if len(r)]
        if not rows:
            return np.zeros(len(store_rows))
        raw = self.store_scores(np.concatenate(rows))
        return np.bincount(ids, weights=raw, minlength=len(store_rows))

    def save(self, path: str) -> None:
        """Write it to `path` (a `.npz` archive of plain arrays), atomically."""
        with atomic_path(path, ".npz") as tmp:
            np.savez_compressed(tmp, **{KIND: np.array(self.name),
                                        FITTED_ON: np.array(json.dumps(self.fitted_on))},
                                **self._arrays())

    @classmethod
    def _fit(cls, frame, target, seed, progress, features, cache_dir):
        raise NotImplementedError

    @staticmethod
    def _settings() -> dict:
        """What else `fitted_on` records: library versions, sizes a file needs to load."""
        return {}

    def _arrays(self) -> dict:
        raise NotImplementedError

    @classmethod
    def _from_arrays(cls, z, fitted_on: dict) -> "StoreModel":
        raise NotImplementedError


@STORE_MODELS.register("xgb")
class XGBStoreModel(StoreModel):
    """MetaSchedule's XGBModel (`fit_xgb`); its file is `save_xgb`'s, which `ms-xgb-pretrained`
    reads too (`load_xgb`)."""

    name = "xgb"

    @classmethod
    def _fit(cls, frame, target, seed, progress, features, cache_dir):
        return fit_xgb(frame, target, seed, progress)  # XGBModel extracts its own features

    @staticmethod
    def _settings() -> dict:
        import tvm
        import xgboost

        return {"xgboost": xgboost.__version__, "tvm": tvm.__version__}

    def score(self, frame, features=None, cache_dir=None) -> pd.Series:
        return predict_xgb(self.model, frame, self.target)

    def store_scores(self, rows: np.ndarray) -> np.ndarray:
        import xgboost as xgb

        return self.model.booster.predict(xgb.DMatrix(rows), output_margin=True,
                                          validate_features=False)

    def trained_on(self, store_rows: list[np.ndarray], log_latency: np.ndarray, rounds: int,
                   seed: int = 0, threads: int | None = None,
                   groups: np.ndarray | None = None) -> "XGBStoreModel":
        """A copy whose booster trains `rounds` more rounds on measured programs (their
        per-store rows and log-latencies; `groups`: each one's workload, where they are of
        several), as MetaSchedule's XGBModel trains in tuning: pack-sum squared error on each
        program's throughput over its workload's fastest, weighted by it. This model is left
        as it is."""
        import types

        import xgboost as xgb
        from tvm.s_tir.meta_schedule.cost_model.xgb_model import PackSum, XGBConfig

        log_latency = np.asarray(log_latency, float)
        groups = np.zeros(len(log_latency), int) if groups is None else np.asarray(groups)
        fastest = {g: log_latency[groups == g].min() for g in np.unique(groups)}
        pack = PackSum(xs=list(store_rows),
                       ys=np.exp(np.array([fastest[g] for g in groups]) - log_latency))
        config = XGBConfig(seed=seed, nthread=threads or os.cpu_count() or 1).to_dict()
        booster = xgb.train(config, pack.dmatrix, num_boost_round=rounds,
                            xgb_model=self.model.booster.copy(),
                            obj=lambda pred, _dtrain: pack.obj_square_error(pred))
        return XGBStoreModel(types.SimpleNamespace(booster=booster),
                             {**self.fitted_on, "trained_on": len(store_rows)}, self._target)

    def save(self, path: str) -> None:
        save_xgb(self.model, path, json.dumps(self.fitted_on, sort_keys=True), self.fitted_on)



# the lines of LightGBM's model text that training writes and prediction never reads (per
# node: split gains, internal values, weights and counts; per leaf: weights and counts; the
# header's byte sizes of the trees, which then no longer hold): 42% of the H100 model's text
TRAINING_ONLY = ("split_gain=", "internal_value=", "internal_weight=", "internal_count=",
                 "leaf_weight=", "leaf_count=", "tree_sizes=")


def prediction_text(booster) -> str:
    """A LightGBM booster's model text without `TRAINING_ONLY` lines: it loads and predicts
    exactly as the whole text does."""
    return "".join(line for line in booster.model_to_string().splitlines(keepends=True)
                   if not line.startswith(TRAINING_ONLY))


@STORE_MODELS.register("lightgbm")
class LightGBMStoreModel(StoreModel):
    """TenSet's LightGBM (`fit_lightgbm`); saved as LightGBM's own model text, LZMA-packed."""

    name = "lightgbm"

    @classmethod
    def _fit(cls, frame, target, seed, progress, features, cache_dir):
        if features is None:
            features = per_store_features(frame, target, progress, cache_dir)
        return fit_lightgbm(frame, target, seed, progress, features)

    @staticmethod
    def _settings() -> dict:
        import lightgbm

        from costmodel.views.store import STORE_FEATURES_VERSION

        return {"lightgbm": lightgbm.__version__, "store_features": STORE_FEATURES_VERSION}

    def score(self, frame, features=None, cache_dir=None) -> pd.Series:
        if features is None:
            features = per_store_features(frame, self.target, cache_dir=cache_dir)
        return predict_lightgbm(self.model, frame, self.target, features)

    def store_scores(self, rows: np.ndarray) -> np.ndarray:
        return self.model.predict(rows, num_threads=LIGHTGBM_THREADS)

    def _arrays(self) -> dict:
        return {"model": companions.pack(prediction_text(self.model).encode())}

    @classmethod
    def _from_arrays(cls, z, fitted_on: dict) -> "LightGBMStoreModel":
        import lightgbm as lgb

        stored = z["model"]  # LZMA-packed text; a string in the first companion files
        text = str(stored) if stored.dtype.kind == "U" else companions.unpack(stored).decode()
        try:
            return cls(lgb.Booster(model_str=text), fitted_on)
        except lgb.basic.LightGBMError as err:
            raise ValueError(f"LightGBM cannot read its model: {err}") from None


@STORE_MODELS.register("mlp")
class TenSetMLPStoreModel(StoreModel):
    """TenSet's MLP (`fit_tenset_mlp`); saved as its weights and input scale."""

    name = "mlp"

    @classmethod
    def _fit(cls, frame, target, seed, progress, features, cache_dir):
        return fit_tenset_mlp(frame, target, seed, progress, features, cache_dir)

    @staticmethod
    def _settings() -> dict:
        from costmodel.views.store import STORE_FEATURES_VERSION

        return {"torch": torch.__version__, "store_features": STORE_FEATURES_VERSION,
                "hidden": TENSET_MLP["hidden"]}

    def score(self, frame, features=None, cache_dir=None) -> pd.Series:
        return predict_tenset_mlp(self.model, frame, self.target, features, cache_dir)

    def throughput(self, store_rows: list[np.ndarray]) -> np.ndarray:
        """Its score of each program (higher is faster) from the program's per-store rows:
        the network itself, which sums its stores inside (`SegmentSumMLP`)."""
        net, scale = self.model
        counts = np.array([len(r) for r in store_rows], dtype=np.int64)
        if not counts.any():
            return np.zeros(len(store_rows))
        rows = np.concatenate([r for r in store_rows if len(r)]).astype(np.float32) / scale
        ids = np.repeat(np.arange(len(store_rows)), counts)
        with torch.no_grad():
            return net(torch.from_numpy(rows), torch.from_numpy(ids),
                       len(store_rows)).numpy().astype(float)

    def _arrays(self) -> dict:
        """Its input scale and its weights: each matrix as int8 with a scale per row
        (`quantised`), LZMA-packed, the biases as they are (0.21 MB at TenSet's width where
        float32 took 0.91; on the shipped companion's records its scores move by at most 1%
        of their range, correlating with float32's at 0.9999)."""
        net, scale = self.model
        out = {"scale": scale}
        for key, value in net.state_dict().items():
            value = value.detach().cpu().numpy()
            if value.ndim == 2:
                q, row_scale = quantised(value)
                out[f"weight:{key}"], out[f"qscale:{key}"] = companions.pack(q), row_scale
            else:
                out[f"weight:{key}"] = value
        return out

    @classmethod
    def _from_arrays(cls, z, fitted_on: dict) -> "TenSetMLPStoreModel":
        scale = z["scale"]
        net = SegmentSumMLP(len(scale), int(fitted_on["hidden"]))
        shapes = {k: v.shape for k, v in net.state_dict().items()}
        state = {}
        for key in (k for k in z.files if k.startswith("weight:")):
            name, stored = key[len("weight:"):], z[key]
            if name not in shapes:
                raise ValueError(f"an MLP weight {name!r} this network does not have")
            if stored.dtype == np.uint8:  # packed: int8 with row scales, or float16
                raw = companions.unpack(stored)
                quant = f"qscale:{name}" in z.files
                values = np.frombuffer(raw, dtype=np.int8 if quant else np.float16)
                if values.size != np.prod(shapes[name]):
                    raise ValueError(f"MLP weight {name!r} holds {values.size} values for a "
                                     f"{tuple(shapes[name])} tensor")
                stored = values.reshape(shapes[name]).astype(np.float32)
                if quant:
                    stored = stored * z[f"qscale:{name}"].reshape(-1, 1)
            state[name] = torch.from_numpy(np.asarray(stored, dtype=np.float32).copy())
        net.load_state_dict(state)
        return cls((net.eval(), scale), fitted_on)


def load_store_model(path: str, scoring_only: bool = False,
                     hint: str = "fit it again (its `save` writes the file)") -> StoreModel:
    """The model in `path`, loaded without unpickling anything: what `StoreModel.save` wrote,
    or a file beside a checkpoint (`costmodel.companions`) of an earlier layout: a pretrained
    XGBModel as `save_xgb` writes it without `fitted_on` (its `fitted_on` then holds its
    fingerprint and records), a LightGBM companion of formats 1 and 2. `scoring_only`: an
    XGBModel without its training features, which scores but cannot go on learning (a
    fraction of the time and memory to load); its `fitted_on` says `scoring_only`.

    Raises:
        UserError: the file is missing, damaged or no saved store model (`hint` says what
            to do).
    """
    try:
        with np.load(path, allow_pickle=False) as z:
            if KIND in z and FITTED_ON in z:
                kind, fitted_on = str(z[KIND]), json.loads(str(z[FITTED_ON]))
            elif any(k in z for k in BOOSTER_KEYS) and "fingerprint" in z:  # save_xgb's
                kind, fitted_on = "xgb", {"model": "xgb", "fingerprint": str(z["fingerprint"]),
                                          "records": int(z["rows"].size)}
            elif {"format", "model", "info"} <= set(z.files):  # a LightGBM companion, 1 or 2
                kind, fitted_on = "lightgbm", _lightgbm_companion_info(z, path, hint)
            else:
                raise UserError(f"{path} is no saved store model (it names no kind and no "
                                f"fitting); {hint}")
            cls = STORE_MODELS.get(kind) if kind in STORE_MODELS else None
            if cls is None:
                raise UserError(f"{path} holds a {kind!r} model; store models are "
                                f"{', '.join(STORE_MODELS.names())}")
            if cls is not XGBStoreModel:
                return cls._from_arrays(z, fitted_on)
            if scoring_only:
                return XGBStoreModel(_xgb_for_scoring(z), {**fitted_on, "scoring_only": True})
    except (OSError, ValueError, KeyError, RuntimeError, EOFError, zipfile.BadZipFile) as err:
        raise UserError(f"{path} is not a readable store model ({str(err)[:200]}); {hint}") \
            from None
    return XGBStoreModel(load_xgb(path), fitted_on)


LIGHTGBM_COMPANION_FORMATS = (1, 2)  # 1: the model text as a string; 2: LZMA-packed


def _lightgbm_companion_info(z, path: str, hint: str) -> dict:
    """What a LightGBM companion file of an earlier layout was fitted on (its `info`)."""
    version = int(z["format"])
    if version not in LIGHTGBM_COMPANION_FORMATS:
        raise UserError(f"{path} is format {version}, this version reads formats "
                        f"{', '.join(map(str, LIGHTGBM_COMPANION_FORMATS))}; {hint}")
    return {"model": "lightgbm", **json.loads(str(z["info"]))}


def _xgb_for_scoring(z):
    """An XGBModel with the booster of a `save_xgb` file and none of its training features."""
    import xgboost as xgb

    booster = xgb.Booster()
    try:
        booster.load_model(_booster_bytes(z))
    except xgb.core.XGBoostError as err:
        raise ValueError(f"XGBoost cannot read its model: {str(err)[:200]}") from None
    booster.set_param({"nthread": 1})
    model = new_xgb()
    model.booster = booster
    return model
