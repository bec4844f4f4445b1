"""Cost-model checkpoints: the one place they are written, read and checked.

A checkpoint is a `torch.save` file of plain containers, numbers, strings and tensors. It is
read with `torch.load(..., weights_only=True)`, torch's restricted unpickler, which builds
nothing but those types: loading a file from a stranger runs no code, and a file that asks for
anything else (a crafted pickle) is refused. The only other types allowed are numpy's string
scalars, which format-1 checkpoints carry in their split.

Entries (the checkpoints `train fit` writes have these plus Lightning's optimiser state):

- "costmodel": the self-description. `format_version` (`FORMAT_VERSION`); the featuriser it
  was trained with (`featurizer_version`, `vocabulary`, `node_features`, `program_features`,
  `edge_types`; and the version of each optional view the architecture reads, under the
  view's `key` (`costmodel.views`): `store_features`, the layout of MetaSchedule's per-store
  features, `trace_features`, the layout of the trace's tokens, and `warp_features`, the
  layout of the nodes' warp access features); `architecture`,
  from which the network is rebuilt (`costmodel.model.create_model`); `normalization` (its
  `per_workload` says the model was trained on per-workload standardised labels and predicts a
  relative score, not a latency; files without it predict latency); `target` (JSON) and
  `target_kind`; the training `dataset`, `split` and `sides` (the workload keys of each side);
  `train_share` (`share`, its `seed`, and the training `records` of the side's `of`; absent
  from older files); if its training started from another checkpoint's weights
  (`--model.init_from`), `init_from` (`provenance`: that file's path and SHA-256, its target,
  dataset and split); if other datasets trained beside its own (`--data.joint_dataset`),
  `joint` (for each: that `dataset`, the `share` of it, its `target`, and the `records` and
  `workloads` trained on; one such dict for one folder, a list of them for several).
- "hyper_parameters": the training hyperparameters (the loss settings also serve `adapt`);
  files of older training name the optional views read by their own flags
  (`use_store_features`, ...) and options (`trace_layers`), which `load` reads as the `views`
  and `view_options` of today's (`current_hparams`).
- "state_dict": the network's parameters, each key prefixed with "model.".

A seed ensemble packed in one file (`costmodel ensemble`, `CostModelPredictor.save` of several
members) has "members" in place of "state_dict": one such dict per network, all of one
description and hyperparameters, which record `ensemble` (the number of members). Either kind
may store its parameters as float16 (`weights_dtype`, to halve the file): they load into the
network's float32 parameters.

Format versions: 1, written until tvm-costmodel 0.1.0 (no version, architecture or target
kind); 2, now. `costmodel convert OLD NEW` turns a format-1 file into the current format.
"""

from __future__ import annotations

import dataclasses
import json
import os
import warnings

import torch

from costmodel import featurize, views
from costmodel.model import create_model
from costmodel.normalization import Normalization
from datagen.errors import UserError, atomic_path

FORMAT_VERSION = 2
META_KEY = "costmodel"
PREFIX = "model."
MEMBERS = "members"  # the entry of a packed ensemble: one state dict per network
PACKED = ("ensemble", "weights_dtype")  # what packing adds to the members' description
# what the featuriser's graphs look like (the base views' `layout`): a checkpoint must agree
# on every one of these
LAYOUT = {k: v for view in views.VIEWS for k, v in view.layout.items()}


def _safe_types() -> list:
    """The only classes besides torch's own that a checkpoint may ask to build."""
    import numpy as np
    from numpy._core.multiarray import scalar

    return [np.dtype, scalar, np.dtypes.StrDType]


@dataclasses.dataclass
class Checkpoint:
    """A loaded, checked checkpoint: the network (eval mode) and what it needs to predict."""

    path: str
    model: torch.nn.Module
    normalization: Normalization
    meta: dict
    hparams: dict

    @property
    def target_kind(self) -> str:
        return self.meta["target_kind"]

    @property
    def predicts_latency(self) -> bool:
        """False for a model trained on per-workload standardised labels (a relative score)."""
        return self.normalization.predicts_latency


def current_hparams(hparams: dict) -> dict:
    """Training hyperparameters as this version names them: an older file's flag of each
    optional view (`use_KEY`, `View.key`) becomes the view's name in `views`, and the
    views' options given on their own (`trace_layers`) go into `view_options`. Files that
    already name their views come back as they are."""
    hparams = dict(hparams)
    if "views" in hparams:
        return hparams
    optional = views.optional()
    hparams["views"] = [view.name for view in optional if hparams.pop(f"use_{view.key}", False)]
    options = {k: hparams.pop(k) for view in optional for k in view.options if k in hparams}
    if options:
        hparams["view_options"] = options
    return hparams


def describe(model, normalization: Normalization, target: str, dataset: str, split: str,
             sides: dict[str, list[str]], init_from: dict | None = None,
             train_share: dict | None = None, joint: dict | list[dict] | None = None,
             test_dataset: str | None = None) -> dict:
    """The self-description of a checkpoint of `model` (the "costmodel" entry); `init_from`
    (`source`'s description), `train_share` (the share of the training side's records it
    was trained on), `joint` (the other datasets that trained beside it) and `test_dataset` (the
    other suite a cross-suite split tests on) are recorded when given."""
    meta = {"format_version": FORMAT_VERSION, "featurizer_version": featurize.FEATURIZER_VERSION,
            **LAYOUT, "architecture": dict(model.architecture),
            "normalization": normalization.to_dict(), "target": target,
            "target_kind": json.loads(target)["kind"], "dataset": dataset, "split": split,
            "sides": {side: [str(k) for k in keys] for side, keys in sides.items()}}
    for view in views.optional():  # the version of each view the model reads
        if view.reads(model.architecture):
            meta[view.key] = view.version
    if init_from is not None:
        meta["init_from"] = init_from
    if train_share is not None:
        meta["train_share"] = train_share
    if joint is not None:
        meta["joint"] = joint
    if test_dataset is not None:
        meta["test_dataset"] = test_dataset
    return meta


def provenance(ckpt: Checkpoint) -> dict:
    """What a checkpoint initialised from `ckpt` records of it: the file (path and SHA-256)
    and what it was trained on (target, dataset, split)."""
    import hashlib

    with open(ckpt.path, "rb") as f:
        digest = hashlib.sha256(f.read()).hexdigest()
    return {"path": ckpt.path, "sha256": digest, "target": ckpt.meta["target"],
            "dataset": ckpt.meta["dataset"], "split": ckpt.meta["split"]}


def read(path: str) -> dict:
    """The raw entries of a checkpoint file, read without running any code.

    Raises:
        UserError: a missing or unreadable file, one that holds anything but tensors and
            plain containers, or one without a cost-model description.
    """
    if not os.path.isfile(path):
        raise UserError(f"checkpoint {path} does not exist")
    try:
        with torch.serialization.safe_globals(_safe_types()), warnings.catch_warnings():
            # torch warns of a pickle protocol it may not read before it refuses the file
            warnings.filterwarnings("ignore", message="Detected pickle protocol")
            ckpt = torch.load(path, map_location="cpu", weights_only=True)
    except Exception as err:  # noqa: BLE001  (torch raises UnpicklingError, RuntimeError, ...)
        text = str(err)
        if "Weights only load failed" in text or "Unsupported global" in text:
            raise UserError(f"{path} was refused: it holds objects other than tensors and plain "
                            "containers, and loading those could run code") from None
        raise UserError(f"{path} is not a readable checkpoint: not a file that torch.save "
                        f"wrote, or a damaged one ({type(err).__name__}); give one that "
                        "'train fit' wrote") from None
    if not isinstance(ckpt, dict) or not isinstance(ckpt.get(META_KEY), dict):
        raise UserError(f"{path} is not a cost-model checkpoint (no '{META_KEY}' entry)")
    return ckpt


def validate(path: str, meta: dict, target_kind: str | None = None) -> None:
    """Check a checkpoint's self-description against this version of the code.

    Raises:
        UserError: one line per mismatch: format version, featuriser version or layout,
            architecture, or target kind (when `target_kind` is given).
    """
    version = meta.get("format_version", 1)
    if version < FORMAT_VERSION:
        raise UserError(f"{path} is a format-{version} checkpoint and this version reads format "
                        f"{FORMAT_VERSION}: convert it with 'costmodel convert {path} NEW.ckpt' "
                        "(or retrain)")
    if version > FORMAT_VERSION:
        raise UserError(f"{path} is a format-{version} checkpoint from a newer tvm-costmodel; "
                        f"this version reads format {FORMAT_VERSION}: upgrade tvm-costmodel")
    if meta["featurizer_version"] != featurize.FEATURIZER_VERSION:
        raise UserError(f"{path} was trained with featuriser {meta['featurizer_version']}, "
                        f"this version has {featurize.FEATURIZER_VERSION}: retrain it")
    for name, ours in LAYOUT.items():
        if meta.get(name) != ours:
            raise UserError(f"{path} was trained on graphs with other {name.replace('_', ' ')} "
                            f"than featuriser {featurize.FEATURIZER_VERSION} makes here: "
                            "retrain it")
    architecture = meta.get("architecture")
    if not isinstance(architecture, dict) or "name" not in architecture:
        raise UserError(f"{path} does not say which architecture it holds")
    for view in views.optional():
        if view.reads(architecture) and (meta.get(view.key) != view.version or any(
                architecture.get(k) != size for k, size in view.sizes.items())):
            theirs = ", ".join(f"{architecture.get(k)} {unit}"
                               for k, unit in zip(view.sizes, view.units))
            ours = ", ".join(str(size) for size in view.sizes.values())
            raise UserError(f"{path} reads {view.label} {meta.get(view.key)} ({theirs}), this "
                            f"version {view.verb} {view.version} ({ours}): retrain it")
    if target_kind is not None and meta["target_kind"] != target_kind:
        raise UserError(f"{path} was trained for {meta['target_kind']} targets, not "
                        f"{target_kind}; pass a checkpoint trained on {target_kind} measurements")


def load(path: str, target_kind: str | None = None) -> Checkpoint:
    """Read, check and rebuild a checkpoint of one network; it comes back in eval mode.

    Raises:
        UserError: see `load_members`; also a packed ensemble (where one network is needed).
    """
    members = load_members(path, target_kind)
    if len(members) != 1:
        raise UserError(f"{path} is an ensemble of {len(members)} networks and this needs one: "
                        "give one of the checkpoints it was packed from")
    return members[0]


def load_members(path: str, target_kind: str | None = None) -> list[Checkpoint]:
    """Read, check and rebuild the network of a checkpoint, or each network of a packed
    ensemble (`pack`); they come back in eval mode.

    Raises:
        UserError: see `read` and `validate`; also an unknown architecture, or weights that
            do not fit the architecture the checkpoint names.
    """
    ckpt = read(path)
    meta = ckpt[META_KEY]
    validate(path, meta, target_kind)
    states = ckpt[MEMBERS] if MEMBERS in ckpt else [ckpt.get("state_dict", {})]
    if not isinstance(states, list) or not states or not all(isinstance(w, dict) for w in states):
        raise UserError(f"{path}: its '{MEMBERS}' entry is not a list of networks' weights")
    members = []
    for state in states:
        try:
            model = create_model(meta["architecture"])
        except UserError as err:
            raise UserError(f"{path}: {err}") from None
        except TypeError as err:
            raise UserError(f"{path}: architecture {meta['architecture']['name']!r} does not "
                            f"take these arguments ({err})") from None
        weights = {k.removeprefix(PREFIX): v for k, v in state.items() if k.startswith(PREFIX)}
        try:
            model.load_state_dict(weights)  # float16 weights are copied into float32 ones
        except RuntimeError as err:
            first = str(err).strip().splitlines()[0]
            raise UserError(f"{path}: its weights do not fit architecture "
                            f"{meta['architecture']['name']!r} ({first.rstrip(':.')})") from None
        members.append(Checkpoint(path, model.eval(),
                                  Normalization.from_dict(meta["normalization"]), meta,
                                  current_hparams(ckpt.get("hyper_parameters", {}))))
    return members


def _write(path: str, meta: dict, hparams: dict, models: list, half: bool) -> None:
    """One network's weights under "state_dict", several under `MEMBERS`, float16 if `half`;
    written to a temporary file and renamed, so never half there."""
    meta = {k: v for k, v in meta.items() if k not in PACKED}
    if len(models) > 1:
        meta["ensemble"] = len(models)
    if half:
        meta["weights_dtype"] = "float16"
    weights = [{PREFIX + k: v.detach().cpu().half() if half and v.is_floating_point()
                else v.detach().cpu() for k, v in model.state_dict().items()}
               for model in models]
    ckpt = {META_KEY: meta, "hyper_parameters": dict(hparams),
            **({"state_dict": weights[0]} if len(weights) == 1 else {MEMBERS: weights})}
    with atomic_path(path, ".ckpt") as tmp:
        torch.save(ckpt, tmp)


def save(path: str, model, meta: dict, hparams: dict, half: bool = False) -> None:
    """Write a checkpoint `load` reads back: the network's weights and its description only
    (no optimiser state), the weights as float16 if `half`. Written to a temporary file and
    renamed, so never half there."""
    _write(path, meta, hparams, [model], half)


def pack(path: str, members: list[Checkpoint], half: bool = False) -> None:
    """Write several networks trained alike (the seeds of one configuration) as one
    checkpoint that `load_members` reads back (one network: as `save` writes it).

    Raises:
        UserError: members whose descriptions or training hyperparameters differ (another
            split, dataset, target, architecture or loss): they are not one model's seeds.
    """
    if not members:
        raise UserError("an ensemble needs at least one network")
    first = members[0]
    for m in members[1:]:
        differ = sorted(k for k in first.meta.keys() | m.meta.keys()
                        if k not in PACKED and first.meta.get(k) != m.meta.get(k))
        differ += sorted(k for k in first.hparams.keys() | m.hparams.keys()
                         if first.hparams.get(k) != m.hparams.get(k))
        if differ:
            raise UserError(f"{m.path} and {first.path} differ in {', '.join(differ)}: an "
                            "ensemble packs networks of one configuration trained with other "
                            "seeds")
    _write(path, first.meta, first.hparams, [m.model for m in members], half)


def convert(src: str, dst: str) -> dict:
    """Rewrite an older-format checkpoint in the current format; returns its description.

    Format 1 lacks the version, the architecture (rebuilt from the hyperparameters and the
    featuriser layout it was trained with) and the target kind. The weights are unchanged.

    Raises:
        UserError: `src` is unreadable, already current, or made by another featuriser.
    """
    ckpt = read(src)
    meta = dict(ckpt[META_KEY])
    version = meta.get("format_version", 1)
    if version >= FORMAT_VERSION:
        raise UserError(f"{src} is already a format-{version} checkpoint; nothing to convert")
    hp = dict(ckpt.get("hyper_parameters", {}))
    hp.pop("_instantiator", None)
    meta.update({
        "format_version": FORMAT_VERSION,
        "architecture": {
            "name": "graphsage", "num_node_kinds": len(meta["vocabulary"]),
            "num_node_features": len(meta["node_features"]),
            "num_edge_types": len(meta["edge_types"]),
            "num_program_features": len(meta["program_features"])
            if hp.get("use_program_features", True) else 0,
            "hidden": hp["hidden"], "num_layers": hp["num_layers"], "dropout": hp["dropout"]},
        "target_kind": json.loads(meta["target"])["kind"],
        "sides": {side: [str(k) for k in keys] for side, keys in meta["sides"].items()},
    })
    hp.pop("model", None)  # format 1's name for what training now calls the architecture
    hp.setdefault("architecture", meta["architecture"]["name"])
    validate(src, meta)
    model = create_model(meta["architecture"])
    model.load_state_dict({k.removeprefix(PREFIX): v for k, v in ckpt["state_dict"].items()
                           if k.startswith(PREFIX)})
    save(dst, model, meta, hp)
    return meta
