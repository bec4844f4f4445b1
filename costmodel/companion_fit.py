"""`costmodel blend`: the tree companions of a checkpoint (`costmodel.blend`).

TenSet's LightGBM (`NAME.lgb.npz`) and MLP (`NAME.mlp.npz`, `costmodel.store_models`, seed 0)
are fitted on exactly the records the checkpoint was trained on and written beside it; the
checkpoint's pretrained XGBModel (`NAME.xgb.npz`, `costmodel.pretrained_xgb`) is fitted if it
is not there yet. A file already there that was fitted on these records is kept. Each named
file is given the network's share of the blend and, where several blend, its own share;
the other companions beside the checkpoint lose theirs (their files stay: a pretrained
XGBModel is still `ms-xgb-pretrained`'s model). `CostModelPredictor.load` (so `tune`,
`costmodel evaluate`, the MetaSchedule adapters) finds them and blends their predictions with
the network's.
"""

from __future__ import annotations

import json
import os

from costmodel import blend
from costmodel.checkpoint import load_members
from datagen.errors import UserError

SEED = 0  # of the LightGBM and the MLP companions


COMPANIONS = ("lightgbm", "xgb", "mlp")


def check_blend(models: list[str], weight: float, shares: list[float] | None) -> list[float]:
    """Each named model's share of the blend: `shares`, or with one model all that the
    network (`weight`) leaves.

    Raises:
        UserError: an unknown or repeated model, a weight outside [0, 1], shares missing or
            of another number than the models, or not adding up to 1 with the weight.
    """
    if not models:
        raise UserError("name a companion model to blend with (--with)")
    if unknown := [m for m in models if m not in COMPANIONS]:
        raise UserError(f"no companion model {unknown[0]!r}; choose from {', '.join(COMPANIONS)}")
    if len(set(models)) < len(models):
        raise UserError(f"--with names a model twice ({' '.join(models)}); give each once")
    if not 0.0 <= weight <= 1.0:  # also refuses NaN
        raise UserError(f"the blend weight is the network's share, in [0, 1], not {weight}")
    if shares is None:
        if len(models) > 1:
            raise UserError(f"give each of the {len(models)} tree models its share of the "
                            f"blend (--shares, {len(models)} numbers adding up to "
                            f"{1 - weight:g} with --weight {weight:g})")
        return [1 - weight]
    if len(shares) != len(models):
        raise UserError(f"{len(shares)} shares for {len(models)} tree models; give one each")
    if not all(0.0 <= s <= 1.0 for s in shares) or abs(sum(shares) + weight - 1) > 1e-6:
        raise UserError(f"the shares {' '.join(f'{s:g}' for s in shares)} and the network's "
                        f"{weight:g} must be in [0, 1] and add up to 1")
    return list(shares)


def fit_companion(checkpoint_path: str, dataset: str | None = None,
                  weight: float = blend.DEFAULT_WEIGHT, out: str | None = None,
                  cache_dir: str | None = None, progress: bool = True,
                  model: str | list[str] = "lightgbm",
                  shares: list[float] | None = None) -> list[str]:
    """Fit the tree companions of a checkpoint and give them the blend's weights; returns
    their paths.

    Args:
        dataset: the records the checkpoint was trained on (default: the folder it names).
        weight: the network's share of the blend, in [0, 1] (the rest is the trees').
        out: where to write a single companion (default: beside the checkpoint, where it is
            used; a blend of several lives there).
        cache_dir: a `Featurizer` cache: per-store features found there are not extracted
            again, and those extracted are added (XGBModel extracts its own).
        model: "lightgbm", "xgb" or "mlp", or several of them.
        shares: each model's share of the blend, with several (`check_blend`).

    Raises:
        UserError: as `check_blend`; `out` with several models; an unreadable checkpoint,
            training records that cannot be found, a folder that cannot be written.
    """
    from costmodel import companions

    models = [model] if isinstance(model, str) else list(model)
    shares = check_blend(models, weight, shares)
    if out is not None and len(models) > 1:
        raise UserError("--out names one file: a blend of several tree models lives beside "
                        "its checkpoint")
    ckpt = load_members(checkpoint_path)[0]  # one network or a packed ensemble: one description
    paths = [out or companions.beside(checkpoint_path, blend.SUFFIXES[m]) for m in models]
    for path in paths:
        if not os.access(os.path.dirname(os.path.abspath(path)), os.W_OK):
            raise UserError(f"cannot write {path}: its folder is missing or not writable; "
                            "pass --out FILE somewhere this user can write")
    for name, path in zip(models, paths):
        if not _fitted_here(path, name, ckpt.meta):
            _fit(name, checkpoint_path, ckpt.meta, path, dataset, cache_dir, progress)
    several = len(models) > 1
    for path, share in zip(paths, shares):
        blend.set_weight(path, weight, share if several else None)
    if out is None:  # the others beside the checkpoint no longer blend
        for name, suffix in blend.SUFFIXES.items():
            other = companions.beside(checkpoint_path, suffix)
            if name not in models and os.path.isfile(other) \
                    and blend.stored_weights(other) != (None, None):
                blend.set_weight(other, None)
    return paths


def _fitted_here(path: str, name: str, meta: dict) -> bool:
    """Whether `path` holds a `name` model fitted on the training records of the checkpoint
    described by `meta` (an unreadable or foreign file is fitted again)."""
    from costmodel.store_models import load_store_model

    if not os.path.isfile(path):
        return False
    try:
        model = load_store_model(path, scoring_only=True)
    except (UserError, ValueError, OSError):
        return False
    return model.name == name and \
        model.fitted_on.get("fingerprint") == blend.FINGERPRINTS[name](meta)


def _fit(name: str, checkpoint_path: str, meta: dict, path: str, dataset: str | None,
         cache_dir: str | None, progress: bool) -> None:
    """Fit the `name` companion on the checkpoint's training records and write it to `path`
    (without a blend weight yet)."""
    from costmodel import pretrained_xgb
    from costmodel.data_module import trained_records
    from costmodel.store_models import STORE_MODELS, per_store_features
    from datagen.errors import atomic_path
    from datagen.tvm_env import make_target

    if name == "xgb":
        pretrained_xgb.write_pretrained_xgb(checkpoint_path, meta, path, dataset, progress)
        return
    frame = trained_records(checkpoint_path, meta, dataset, f"the {name} companion")
    target = make_target(json.loads(meta["target"]))
    features = per_store_features(frame, target, progress, cache_dir=cache_dir)
    store = STORE_MODELS.get(name).fit(frame, target, seed=SEED, features=features,
                                       progress=progress)
    store.fitted_on.update(fingerprint=blend.FINGERPRINTS[name](meta),
                           checkpoint=os.path.basename(checkpoint_path),
                           dataset=dataset or meta["dataset"])
    with atomic_path(path, ".npz") as tmp:
        store.save(tmp)


def shares_text(models: list[str], weight: float, shares: list[float]) -> str:
    """The blend in words: "0.2 of the network blended with 0.8 of MetaSchedule's XGBModel"."""
    trees = [f"{s:g} of {blend.TITLES[m]}" for m, s in zip(models, shares)]
    return f"{weight:g} of the network blended with " + (
        trees[0] if len(trees) == 1 else ", ".join(trees[:-1]) + " and " + trees[-1])
