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


def blend(log_seconds: np.ndarray, throughput: np.ndarray, groups, weight: float,
          shares=None) -> np.ndarray:
    """The blended log-latency of every program: within each group, `weight` of the network's
    standardised log-latency and the rest the trees' standardised negated throughputs,
    mapped back to the network's mean and standard deviation in that group.

    Args:
        throughput: one tree model's score per program, or several's (a column each).
        shares: each column's share of the blend (summing to 1 - `weight`); None: one tree,
            all of the rest.
    """
    log_seconds = np.asarray(log_seconds, float)
    if len(log_seconds) == 0:
        return log_seconds
    throughput = np.asarray(throughput, float).reshape(len(log_seconds), -1)
    shares = [1 - weight] if shares is None else list(shares)
    if len(shares) != throughput.shape[1]:
        raise ValueError(f"{len(shares)} shares for {throughput.shape[1]} tree models")
    _, groups = np.unique(np.asarray(groups), return_inverse=True)
    mixed = weight * standardised(log_seconds, groups)
    for column, share in zip(throughput.T, shares):
        mixed += share * standardised(-column, groups)
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


TITLES = {"lightgbm": "TenSet's LightGBM", "xgb": "MetaSchedule's XGBModel",
          "mlp": "TenSet's MLP"}  # by name
WEIGHT = "blend_weight"  # the entry of a companion's file that makes it blend: the network's share
SHARE = "blend_share"  # with several tree models: this one's share of the blend
FINGERPRINTS = {"lightgbm": fingerprint, "xgb": xgb_fingerprint,
                "mlp": fingerprint}  # what each was fitted on
SUFFIXES = {"lightgbm": SUFFIX, "xgb": companions.XGB_SUFFIX,
            "mlp": companions.MLP_SUFFIX}  # alone, LightGBM first where several blend


class Companion:
    """The store models fitted on a checkpoint's training records (`costmodel.store_models`)
    that blend with it, and the blend's weights: `weight` the network's share, the rest the
    trees', divided among them in `proportions` (one tree: all of it). Each model's file is
    the store model's, with the network's share as one more entry and, where several blend,
    its own share (`shares`) as another."""

    def __init__(self, model, weight: float, path: str | None = None, proportions=None):
        self.models = list(model) if isinstance(model, (list, tuple)) else [model]
        self.paths = list(path) if isinstance(path, (list, tuple)) else [path]
        if len(self.paths) != len(self.models):
            raise ValueError(f"{len(self.paths)} paths for {len(self.models)} tree models")
        proportions = np.ones(len(self.models)) if proportions is None \
            else np.asarray(proportions, float)
        self.proportions = proportions / proportions.sum()
        self.weight = weight

    def __repr__(self) -> str:
        shares = "" if len(self.models) == 1 else \
            ", shares=" + "/".join(f"{s:.2f}" for s in self.shares)
        return (f"Companion({self.name}, weight={self.weight}{shares}, "
                f"records={self.info.get('records')})")

    def __deepcopy__(self, memo) -> "Companion":
        """A copy with its own weight that shares the fitted models: nothing changes the trees
        once fitted, and MetaSchedule's XGBModel (a TVM object) cannot be deep-copied."""
        return Companion(self.models, self.weight, self.paths, self.proportions)

    @property
    def model(self):
        """The (first) store model."""
        return self.models[0]

    @property
    def path(self) -> str | None:
        """The (first) store model's file."""
        return self.paths[0]

    @property
    def names(self) -> list[str]:
        """The store models it is made of (`costmodel.store_models.STORE_MODELS`)."""
        return [m.name for m in self.models]

    @property
    def name(self) -> str:
        """The store models it is made of, joined by "+" ("xgb", "xgb+mlp")."""
        return "+".join(self.names)

    @property
    def shares(self) -> np.ndarray:
        """Each tree model's share of the blend (summing to 1 - `weight`: a network share set
        later scales them alike)."""
        return (1 - self.weight) * self.proportions

    @property
    def info(self) -> dict:
        """What the (first) model was fitted on (`StoreModel.fitted_on`)."""
        return self.model.fitted_on

    def fits(self, meta: dict) -> bool:
        """Whether each model was fitted on the training records of a checkpoint described by
        `meta`."""
        return all(m.fitted_on.get("fingerprint") == FINGERPRINTS[m.name](meta)
                   for m in self.models)

    def throughput(self, store_rows: list[np.ndarray]) -> np.ndarray:
        """Predicted throughput (higher is faster) of each program from its per-store rows:
        one per program, or with several models a column each."""
        if len(self.models) == 1:
            return self.model.throughput(store_rows)
        return np.stack([m.throughput(store_rows) for m in self.models], axis=1)

    def blend(self, log_seconds: np.ndarray, throughput: np.ndarray, groups) -> np.ndarray:
        """The network's log-latencies blended with `throughput` (`self.throughput`'s)."""
        return blend(log_seconds, throughput, groups, self.weight,
                     None if len(self.models) == 1 else self.shares)

    def save(self, path: str) -> None:
        """Write a single store model and the weight to `path`, atomically."""
        if len(self.models) > 1:
            raise ValueError("a companion of several models is saved with save_beside")
        _write(self.model, path, self.weight)
        self.paths = [path]

    def save_beside(self, checkpoint_path: str) -> None:
        """Write each model's file beside `checkpoint_path` (a model loaded from a file there
        already is kept; one from elsewhere is copied), each with the weights, atomically."""
        import shutil

        several = len(self.models) > 1
        for i, (model, share) in enumerate(zip(self.models, self.shares)):
            beside = companions.beside(checkpoint_path, SUFFIXES[model.name])
            source = self.paths[i]
            if source is None:
                _write(model, beside, self.weight, share if several else None)
            elif os.path.abspath(source) != os.path.abspath(beside):
                with atomic_path(beside, ".npz") as tmp:  # the file it was loaded from, as it is
                    shutil.copyfile(source, tmp)
            self.paths[i] = beside

    @classmethod
    def load(cls, path: str, meta: dict, checkpoint_path: str,
             weight: float | None = None) -> "Companion | None":
        """The companion in `path` of the checkpoint described by `meta`, or None if the file
        holds no blend weight (a pretrained XGBModel that is only `ms-xgb-pretrained`'s
        model); with `weight`, blending at that weight whatever the file holds (to try
        weights). Its share among several (`stored_weights`) is not applied here
        (`load_companion` joins them).

        Raises:
            UserError: an unreadable file, or a model fitted on records other than the
                checkpoint's training records.
        """
        from costmodel.store_models import load_store_model

        named = _named(path)
        hint = f"delete it, or write it again with `costmodel blend {checkpoint_path}" \
               f"{'' if named == 'lightgbm' else ' --with ' + named}`"
        model = load_store_model(path, scoring_only=True, hint=hint)
        if weight is None:
            weight, _ = stored_weights(path)
            if weight is None:
                return None
        if model.name not in FINGERPRINTS:
            raise UserError(f"{path} holds a {model.name} model, which does not blend; {hint}")
        companion = cls(model, float(weight), path)
        if not companion.fits(meta):
            raise UserError(f"{path} was fitted on other records than the training records "
                            f"of {checkpoint_path}; {hint}")
        check_weight(companion.weight, path, hint)
        return companion


def _write(model, path: str, weight: float, share: float | None = None) -> None:
    """A store model's file with the blend's weights in it, written atomically."""
    with atomic_path(path, ".npz") as tmp:
        model.save(tmp)
        set_weight(tmp, weight, share)


def _named(path: str) -> str:
    """The companion name a file's suffix says."""
    return next((name for name, suffix in SUFFIXES.items() if path.endswith(suffix)),
                "lightgbm")


def stored_weights(path: str) -> tuple[float | None, float | None]:
    """The network's share and this model's share of the blend that a companion file holds
    (None for either it does not hold)."""
    with np.load(path, allow_pickle=False) as f:
        weight = f[WEIGHT] if WEIGHT in f else f["weight"] if "weight" in f else None
        share = f[SHARE] if SHARE in f else None
        return (None if weight is None else float(weight),
                None if share is None else float(share))


def set_weight(path: str, weight: float | None, share: float | None = None) -> None:
    """Write (or replace) the blend weight in a companion's file, atomically: the checkpoint
    beside it then predicts the blend; with `share`, also this model's share of a blend of
    several. `weight` None removes both: the file no longer blends (a pretrained XGBModel
    stays `ms-xgb-pretrained`'s model)."""
    if weight is not None:
        check_weight(weight, path, "give the network's share, in [0, 1]")
    if share is not None:
        check_weight(share, path, "give each tree model's share, in [0, 1]")
    with np.load(path, allow_pickle=False) as f:
        arrays = {k: f[k] for k in f.files if k not in (WEIGHT, "weight", SHARE)}
    extra = {} if weight is None else {WEIGHT: np.float64(weight)}
    if share is not None:
        extra[SHARE] = np.float64(share)
    with atomic_path(path, ".npz") as tmp:
        np.savez_compressed(tmp, **arrays, **extra)


def load_companion(checkpoint_path: str, meta: dict) -> Companion | None:
    """The companion a checkpoint blends with: the tree models beside it whose files hold a
    share of a blend of several (`SHARE`), all together; else the first (in `SUFFIXES`' order)
    whose file holds a blend weight; else None.

    Raises:
        UserError: a companion file that is unreadable or fitted on other records; files of
            one blend that disagree on the network's share or whose shares do not add up.
    """
    found = []
    for suffix in SUFFIXES.values():
        if os.path.isfile(path := companions.beside(checkpoint_path, suffix)):
            if (companion := Companion.load(path, meta, checkpoint_path)) is not None:
                found.append((companion, stored_weights(path)[1]))
    several = [(c, share) for c, share in found if share is not None]
    if not several:
        return found[0][0] if found else None
    hint = f"write the blend again with `costmodel blend {checkpoint_path} --with " \
           f"{' '.join(c.name for c, _ in several)} ...`"
    weight = several[0][0].weight
    if any(abs(c.weight - weight) > 1e-9 for c, _ in several):
        raise UserError(f"the companions beside {checkpoint_path} disagree on the network's "
                        f"share ({', '.join(str(c.weight) for c, _ in several)}); {hint}")
    shares = np.array([share for _, share in several])
    if abs(shares.sum() + weight - 1) > 1e-6 or shares.sum() <= 0:
        raise UserError(f"the companions beside {checkpoint_path} hold shares "
                        f"{', '.join(f'{s:g}' for s in shares)} beside the network's {weight:g}: "
                        f"they do not add up to 1 (one of the blend's files missing?); {hint}")
    return Companion([c.model for c, _ in several], weight, [c.path for c, _ in several],
                     proportions=shares)
