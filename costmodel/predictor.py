"""The inference API everything else uses: load a checkpoint, predict latencies, fast.

    predictor = CostModelPredictor.load("checkpoints/graphsage-v3.ckpt")
    ensemble = CostModelPredictor.load(["seed0.ckpt", "seed1.ckpt", "seed2.ckpt"])
    on_gpu = CostModelPredictor.load("checkpoints/graphsage-h100.ckpt", device="cuda")
    seconds = predictor.predict([sch1, sch2, ...])          # Schedules or scheduled IRModules
    seconds = predictor.predict_records(frame)              # rows of a datagen dataset
    scores = predictor.score(frame)                         # higher is faster, as store models
    fitted = CostModelPredictor.fit(frame, blend_with="lightgbm")   # trained here, in one call
    fitted.save("mine.ckpt")                                # and its companion, mine.lgb.npz

A checkpoint with tree companions beside it (`costmodel.blend`: its LightGBM `NAME.lgb.npz`,
its pretrained XGBModel `NAME.xgb.npz`, its MLP `NAME.mlp.npz`, each whose file holds a blend
weight) predicts the blend unless loaded with `blend=False`.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import os

import numpy as np
import torch

from costmodel import blend as blending
from costmodel import checkpoint, featurize, views
from costmodel.model import batch_inputs
from costmodel.splits import head_for
from datagen.errors import UserError

PREDICT_BATCH = 128  # graphs per forward pass; smaller batches overlap more with lowering


def torch_device(name: str | None) -> torch.device:
    """The torch device called `name` ("cpu" if None), checked to be usable here.

    Raises:
        UserError: an unknown device name, or a CUDA device where torch has no CUDA (a CPU
            build, or no GPU) or fewer GPUs than the index asks for.
    """
    try:
        device = torch.device(name or "cpu")
    except RuntimeError:
        raise UserError(f"unknown torch device {name!r}; use cpu or cuda (cuda:N for GPU N)") \
            from None
    if device.type == "cuda":
        if not torch.cuda.is_available():
            build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU-only build"
            raise UserError(f"device {name!r} asked for, but torch {torch.__version__} ({build}) "
                            "sees no CUDA GPU; run on cpu, or install a CUDA build of torch on "
                            "a machine with a GPU")
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise UserError(f"device {name!r} asked for, but torch sees "
                            f"{torch.cuda.device_count()} CUDA GPU(s)")
    elif device.type != "cpu":
        raise UserError(f"device {name!r} is not supported; use cpu or cuda (cuda:N for GPU N)")
    return device


@contextlib.contextmanager
def _one_torch_thread():
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        yield
    finally:
        torch.set_num_threads(threads)


class CostModelPredictor:
    """A trained cost model, or a seed ensemble of them, with its featuriser.

    An ensemble's members are checkpoints of one featuriser and target (usually one training
    run per seed); it predicts the mean of their log-latencies, and its embedding of a program
    is the members' embeddings side by side.

    A model trained with per-workload label normalisation (`predicts_latency` False) predicts
    a score relative to each workload, not a latency: its "seconds" are latency relative to
    the workload's typical program (see `Normalization.log_latency`); they rank the programs
    of one workload and nothing more. Members must agree on which of the two they predict.

    With a `companion` (a `costmodel.blend.Companion`), predictions are the blend of
    the networks' and the tree model's within each workload (`costmodel.blend.blend`); the
    embeddings stay the networks'.

    Args:
        members: loaded `checkpoint.Checkpoint`s (one for a single model).
        cache_dir: optional on-disk cache of featurised graphs.
        companion: a tree model fitted on the members' training records, to blend with.
    """

    def __init__(self, members: list[checkpoint.Checkpoint], cache_dir: str | None = None,
                 companion: blending.Companion | None = None):
        if not members:
            raise UserError("a predictor needs at least one checkpoint")
        first = members[0]
        for m in members[1:]:
            if m.meta["target"] != first.meta["target"]:
                raise UserError(f"ensemble members disagree on the target: {first.path} is for "
                                f"{first.meta['target']}, {m.path} for {m.meta['target']}")
            if m.predicts_latency != first.predicts_latency:
                relative = m if first.predicts_latency else first
                raise UserError(f"ensemble members disagree on what they predict: {relative.path} "
                                "predicts a score relative to each workload "
                                "(normalize_per_workload), the others a latency")
        self.members = members
        self.companion = companion
        self.head: int | str = 0  # `use_head`
        flags = {view.flag: any(view.reads(m.model.architecture) for m in members)
                 for view in views.optional()}  # the views some member reads
        flags[views.STORE.flag] |= companion is not None  # LightGBM reads the store rows
        self.featurizer = featurize.Featurizer(json.loads(first.meta["target"]),
                                               cache_dir=cache_dir, **flags)

    def use_head(self, head: int | str) -> None:
        """Predict with head `head` of networks trained with a head per target
        (`joint_head`): 0, each network's own (the default); 1, 2, ..., the head of the
        target of its `joint_dataset` folders in that place (`head_for`); or "mean", the mean
        of every head's standardised prediction (for a target no head trained on). Latencies
        come out on the own target's scale whatever the head: they rank the programs of a
        workload on the head's target.

        Raises:
            UserError: a head some member does not have.
        """
        if head != "mean" and (not isinstance(head, int) or not 0 <= head < self.heads):
            raise UserError(f"head {head!r}: the checkpoint has heads 0 to {self.heads - 1} "
                            "(one per target it trained on) or 'mean'")
        self.head = head

    def head_for_target(self, target: str) -> int | str:
        """The head that ranks programs of `target` (a target's JSON): the one that trained on
        its records (`splits.head_for`), or for a target none trained on the mean of every head
        (chosen on CPU records no head trained on: bench/README.md "Cost model v3 on four
        CPUs"); 0 for a network of one head."""
        if self.heads == 1:
            return 0
        found = head_for(self.meta, target)
        return found if found is not None and found < self.heads else "mean"

    @property
    def heads(self) -> int:
        """How many heads every member has (1 without `joint_head`)."""
        return min(1 + len(m.model.extra_heads) for m in self.members)

    def _head(self, model, emb: torch.Tensor) -> torch.Tensor:
        """`model`'s standardised prediction from its embedding with the head in use."""
        heads = [model.head, *model.extra_heads]
        if self.head == "mean":
            return torch.stack([h(emb).squeeze(-1) for h in heads]).mean(dim=0)
        return heads[self.head](emb).squeeze(-1)

    @property
    def meta(self) -> dict:
        """The (first) checkpoint's self-description."""
        return self.members[0].meta

    @property
    def target_kind(self) -> str:
        return self.members[0].target_kind

    @property
    def predicts_latency(self) -> bool:
        """True if predictions are latencies; False if they are scores relative to each
        workload (trained with `normalize_per_workload`), which only rank within a workload."""
        return self.members[0].predicts_latency

    def __repr__(self) -> str:
        return (f"CostModelPredictor(featurizer={self.meta['featurizer_version']!r}, "
                f"target={self.target_kind!r}, split={self.meta['split']!r}, "
                f"predicts={'latency' if self.predicts_latency else 'relative score'!r}, "
                f"members={len(self.members)}"
                + (f", blended with {self.companion!r})" if self.companion else ")"))

    @classmethod
    def load(cls, paths: str | list[str], cache_dir: str | None = None,
             target_kind: str | None = None, device: str | None = None,
             blend: bool = True) -> "CostModelPredictor":
        """Load one checkpoint, or several as an ensemble (`costmodel.checkpoint.load` each),
        with the networks on the torch `device` ("cpu" if None; "cuda", "cuda:1", ...), and,
        if `blend`, the tree companion beside the (first) checkpoint when there is one
        (`costmodel.blend.load_companion`).

        Raises:
            UserError: a checkpoint that is missing, unsafe, of another format, featuriser,
                architecture or (when `target_kind` is given) target kind; members that
                disagree on the target; a device this torch cannot use; a companion that is
                unreadable or fitted on other records.
        """
        where = torch_device(device)
        paths = [paths] if isinstance(paths, str) else list(paths)
        members = [m for p in paths for m in checkpoint.load_members(p, target_kind)]
        for m in members:
            m.model.to(where)
        companion = blending.load_companion(paths[0], members[0].meta) if blend else None
        if companion is not None:
            if other := next((m for m in members[1:] if not companion.fits(m.meta)), None):
                raise UserError(f"{companion.path} was fitted on the training records of "
                                f"{paths[0]}, which {other.path} was not trained on; ensemble "
                                "members of one split, or load with blend=False")
        return cls(members, cache_dir, companion)

    @property
    def checkpoints(self) -> list[str]:
        """The checkpoint files the members come from, each once (`load` reads them back)."""
        return list(dict.fromkeys(m.path for m in self.members))  # a packed ensemble once

    @property
    def files(self) -> list[str]:
        """The files the predictions come from: the checkpoints and any companion."""
        return self.checkpoints + (self.companion.paths if self.companion else [])

    @property
    def device(self) -> torch.device:
        """The device the (first) network runs on."""
        return next(self.members[0].model.parameters()).device

    @classmethod
    def fit(cls, frame, target=None, seed: int = 0, progress: bool = False, *,
            cache_dir: str | None = None, max_epochs: int = 30, val_fraction: float = 0.0,
            blend_with: str | None = None, blend_weight: float = blending.DEFAULT_WEIGHT,
            name: str = "the given records", **model) -> "CostModelPredictor":
        """The network fitted on the records of `frame` in one call, as the store models are
        (`costmodel.store_models.StoreModel.fit`): what `train fit` does with the "all" split,
        `max_epochs` epochs on the CPU, the last epoch kept (every workload trains, unless
        `val_fraction` of them validate, which only reports: no epoch is chosen on them); with
        `blend_with` ("lightgbm", "xgb" or "mlp"), blended with that store model fitted on the same
        training records (`blend_weight` of the network's).

        Args:
            frame: records of one target, with `datagen.records`' columns (`read_records`).
            target: the records' TVM target (default: the one they name).
            model: `CostModelModule`'s arguments (`hidden`, `num_layers`, `views`, `lr`, ...).
            name: what the checkpoint's description calls the records.

        Raises:
            UserError: records of several targets or none usable, missing columns, an
                unknown store model or a weight outside [0, 1].
        """
        import tempfile

        import lightning as L

        from costmodel.data_module import ScheduleDataModule
        from costmodel.lightning_module import CostModelModule

        if blend_with is not None and blend_with not in blending.FINGERPRINTS:
            raise UserError(f"cannot blend with {blend_with!r}; choose one of "
                            f"{', '.join(blending.FINGERPRINTS)}")
        blending.check_weight(blend_weight, "the blend", "give the network's share, in [0, 1]")
        L.seed_everything(seed, verbose=False)
        data = ScheduleDataModule.of_records(frame, name, split="all", seed=seed,
                                             val_fraction=val_fraction, cache_dir=cache_dir,
                                             views=model.get("views"))
        module = CostModelModule(**model)
        trainer = L.Trainer(accelerator="cpu", devices=1, max_epochs=max_epochs, logger=False,
                            enable_checkpointing=False, enable_progress_bar=progress,
                            enable_model_summary=False, use_distributed_sampler=False)
        with tempfile.TemporaryDirectory(prefix="fit-") as folder:
            path = os.path.join(folder, "network.ckpt")
            trainer.fit(module, data)
            trainer.save_checkpoint(path, weights_only=True)
            member = checkpoint.load(path)
        member.path = name
        companion = None
        if blend_with is not None:
            from costmodel.store_models import STORE_MODELS
            from datagen.tvm_env import make_target

            train = data.frames["train"]
            target = target or make_target(json.loads(data.target))
            store = STORE_MODELS.get(blend_with).fit(train, target, seed=seed,
                                                     progress=progress, cache_dir=cache_dir)
            store.fitted_on.update(fingerprint=blending.FINGERPRINTS[blend_with](member.meta),
                                   dataset=name)
            companion = blending.Companion(store, blend_weight)
        return cls([member], cache_dir, companion)

    def save(self, path: str, half: bool = False) -> None:
        """Write the model as a checkpoint that `load` reads back (an ensemble packed in one
        file: `checkpoint.pack`; the weights as float16 if `half`), and its companion, if any,
        beside it (`costmodel.blend`), where `load` finds it.

        Raises:
            UserError: ensemble members of other configurations (`checkpoint.pack`).
        """
        checkpoint.pack(path, self.members, half)
        if self.companion is not None:
            self.companion.save_beside(path)

    def predict_graphs(self, graphs: list, groups=None) -> np.ndarray:
        """Latency in seconds for each `ProgramGraph` (a relative score if not
        `predicts_latency`); `groups`: see `predict_and_embed`."""
        return self.predict_and_embed(graphs, groups)[0]

    def predict_and_embed(self, graphs, groups=None) -> tuple[np.ndarray, np.ndarray]:
        """Latency in seconds and the network's graph embedding (the head's input) per graph.

        `graphs` may be any iterable (e.g. `Featurizer.iter_featurize`): batches of
        PREDICT_BATCH are scored as soon as they are there. Results leave the device the
        network runs on. With a companion, `groups` (one label per graph: its workload) says
        within which graphs the predictions are blended; None: all are one workload's.
        """
        log_seconds, throughput, embeddings = self.predict_parts(graphs)
        if self.companion is not None and len(log_seconds):
            groups = np.zeros(len(log_seconds)) if groups is None else np.asarray(groups)
            if len(groups) != len(log_seconds):
                raise ValueError(f"{len(groups)} groups for {len(log_seconds)} graphs")
            log_seconds = self.companion.blend(log_seconds, throughput, groups)
        return np.exp(log_seconds), embeddings

    @torch.no_grad()
    def predict_parts(self, graphs) -> tuple[np.ndarray, np.ndarray | None, np.ndarray]:
        """What the blend is made of, per graph: the network's (the ensemble's mean)
        log-latency, the companion's predicted throughput (None without a companion) and the
        network's embedding."""
        from torch_geometric.data import Batch

        width = sum(m.model.embedding_size for m in self.members)
        log_seconds, embeddings, throughput = [], [], []
        graphs = iter(graphs)
        while chunk := list(itertools.islice(graphs, PREDICT_BATCH)):
            if self.companion is not None:
                throughput.append(self.companion.throughput([g.store_x for g in chunk]))
            logs, embs = [], []
            for m in self.members:
                m.model.eval()
                device = next(m.model.parameters()).device
                batch = Batch.from_data_list([m.normalization.data(g) for g in chunk]).to(device)
                emb = m.model.embed(*batch_inputs(m.model, batch))
                logs.append(m.normalization.log_latency(self._head(m.model, emb), batch.offset))
                embs.append(emb.detach().cpu().numpy())
            log_seconds.append(np.mean(logs, axis=0))
            embeddings.append(np.concatenate(embs, axis=1))
        if not log_seconds:
            return np.zeros(0), (np.zeros(0) if self.companion else None), np.zeros((0, width))
        return (np.concatenate(log_seconds),
                np.concatenate(throughput) if self.companion is not None else None,
                np.concatenate(embeddings))

    def adapt(self, graphs: list, latencies, groups, steps: int, lr: float) -> float:
        """Fine-tune every member on measured programs (full-batch Adam, each member's own
        MSE + rank loss settings and normalisation: a per-workload member standardises each
        group's latencies among these); the last loss, averaged over members.

        Args:
            graphs: `ProgramGraph`s of measured programs.
            latencies: their measured latencies, seconds.
            groups: an integer per program: programs of one workload share it.
            steps: optimiser steps.
            lr: learning rate.
        """
        from torch_geometric.data import Batch

        from costmodel.losses import cost_model_loss

        losses = []
        for m in self.members:
            device = next(m.model.parameters()).device
            ys = m.normalization.targets(graphs, latencies, groups)
            batch = Batch.from_data_list([m.normalization.data(g, y=y, group=grp) for g, y, grp
                                          in zip(graphs, ys, groups)]).to(device)
            optimizer = torch.optim.Adam(m.model.parameters(), lr=lr)
            m.model.train()
            loss = torch.zeros(())
            for _ in range(steps):
                optimizer.zero_grad()
                pred = m.model(*batch_inputs(m.model, batch))
                loss, _ = cost_model_loss(pred, batch.y, batch.group,
                                          m.hparams.get("mse_weight", 1.0),
                                          m.hparams.get("rank_weight", 1.0),
                                          m.hparams.get("rank_loss", "logistic"),
                                          m.normalization.y_std)
                loss.backward()
                optimizer.step()
            m.model.eval()
            losses.append(float(loss.detach().cpu()))
        return float(np.mean(losses))

    def predict(self, schedules: list) -> np.ndarray:
        """Latency in seconds for scheduled IRModules or `tvm.s_tir.Schedule`s (only
        `Schedule`s for a model that reads traces: an IRModule has none). A companion blends
        them as candidates of one workload."""
        return self.score_schedules(schedules)[0]

    def score_schedules(self, schedules: list) -> tuple[np.ndarray, np.ndarray]:
        """`predict_and_embed` of scheduled programs, scoring batches while later ones lower.

        Meanwhile the network runs on one thread: idle torch workers spin and would take the
        cores from the lowering threads (on 2 cores this scores about a third more per second).
        """
        with _one_torch_thread():
            return self.predict_and_embed(self.featurizer.iter_featurize(schedules))

    def score_parts(self, schedules: list, stores: bool = False) -> tuple:
        """`predict_parts` of scheduled programs, lowered as `score_schedules` lowers them;
        with `stores`, each program's per-store feature rows too (a fourth item)."""
        rows: list[np.ndarray | None] = []  # None: a graph without store features

        def keep(graphs):
            for graph in graphs:
                rows.append(getattr(graph, "store_x", None))
                yield graph

        with _one_torch_thread():
            parts = self.predict_parts(keep(self.featurizer.iter_featurize(schedules)))
        return (*parts, rows) if stores else parts

    @property
    def fitted_on(self) -> dict:
        """What the (first) network was trained on, as a store model's `fitted_on` says it
        (`costmodel.store_models`): its dataset, split, training workloads and target."""
        meta = self.meta
        return {"model": meta["architecture"]["name"], "dataset": meta["dataset"],
                "split": meta["split"], "workloads": len(meta["sides"]["train"]),
                "target": meta["target"], "members": len(self.members),
                **({"blended_with": self.companion.name} if self.companion else {})}

    def score(self, frame) -> np.ndarray:
        """A score of every row of a dataset frame, higher is faster (minus the predicted
        log-latency), as the store models score (`costmodel.store_models.StoreModel.score`)."""
        return -np.log(self.predict_records(frame))

    def predict_records(self, frame) -> np.ndarray:
        """Latency in seconds for the rows of a dataset frame (workload_ir, trace, trace_hash)."""
        graphs = list(self.featurizer.iter_records(
            zip(frame.workload_ir, frame.trace, frame.trace_hash)))
        if failed := next((g for g in graphs if isinstance(g, featurize.FeaturizeError)), None):
            raise failed
        return self.predict_graphs(graphs, frame.workload_key.to_numpy())
