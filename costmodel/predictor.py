"""The inference API everything else uses: load a checkpoint, predict latencies, fast.

    predictor = CostModelPredictor.load("checkpoints/graphsage.ckpt")
    seconds = predictor.predict([sch1, sch2, ...])          # Schedules or scheduled IRModules
    seconds = predictor.predict_records(frame)              # rows of a datagen dataset
"""

from __future__ import annotations

import itertools
import json
import os

import numpy as np
import torch

from costmodel import featurize
from costmodel.model import GraphSAGECostModel
from costmodel.normalization import Normalization
from datagen.tvm_env import UserError

CHECKPOINT_KEY = "costmodel"
PREDICT_BATCH = 128  # graphs per forward pass; smaller batches overlap more with lowering


class CostModelPredictor:
    """A trained cost model with its featuriser and normalisation.

    Args:
        model: the network (eval mode).
        normalization: the training split's statistics.
        meta: the checkpoint's self-description (featuriser version, vocabulary, ...).
        use_program_features: whether the model reads whole-program features.
        cache_dir: optional on-disk cache of featurised graphs.
    """

    def __init__(self, model: GraphSAGECostModel, normalization: Normalization, meta: dict,
                 hparams: dict, cache_dir: str | None = None):
        self.model = model.eval()
        self.normalization = normalization
        self.meta = meta
        self.hparams = hparams
        self.use_program_features = bool(hparams["use_program_features"])
        self.featurizer = featurize.Featurizer(json.loads(meta["target"]), cache_dir=cache_dir)

    def __repr__(self) -> str:
        return (f"CostModelPredictor(featurizer={self.meta['featurizer_version']!r}, "
                f"target={self.featurizer.target.kind.name!r}, split={self.meta['split']!r})")

    @classmethod
    def load(cls, path: str, cache_dir: str | None = None) -> "CostModelPredictor":
        """Load a checkpoint written by `train fit`.

        Raises:
            UserError: missing file, not a cost-model checkpoint, or made by another featuriser.
        """
        if not os.path.isfile(path):
            raise UserError(f"checkpoint {path} does not exist")
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
        except Exception as err:  # noqa: BLE001
            raise UserError(f"{path} is not a readable checkpoint ({type(err).__name__})") \
                from None
        meta = ckpt.get(CHECKPOINT_KEY) if isinstance(ckpt, dict) else None
        if meta is None:
            raise UserError(f"{path} is not a cost-model checkpoint (no '{CHECKPOINT_KEY}' entry)")
        if meta["featurizer_version"] != featurize.FEATURIZER_VERSION or \
                meta["vocabulary"] != featurize.VOCABULARY:
            raise UserError(f"{path} was trained with featuriser {meta['featurizer_version']}, "
                            f"this version has {featurize.FEATURIZER_VERSION}: retrain it")
        hp = ckpt["hyper_parameters"]
        model = GraphSAGECostModel(
            num_node_kinds=len(meta["vocabulary"]), num_node_features=len(meta["node_features"]),
            num_edge_types=len(meta["edge_types"]),
            num_program_features=len(meta["program_features"])
            if hp["use_program_features"] else 0,
            hidden=hp["hidden"], num_layers=hp["num_layers"], dropout=hp["dropout"])
        model.load_state_dict({k.removeprefix("model."): v for k, v in ckpt["state_dict"].items()
                               if k.startswith("model.")})
        return cls(model, Normalization.from_dict(meta["normalization"]), meta, dict(hp),
                   cache_dir)

    def save(self, path: str) -> None:
        """Write a checkpoint that `load` reads back (as `train fit` writes them)."""
        ckpt = {CHECKPOINT_KEY: self.meta, "hyper_parameters": self.hparams,
                "state_dict": {f"model.{k}": v for k, v in self.model.state_dict().items()}}
        tmp = f"{path}.tmp-{os.getpid()}"
        torch.save(ckpt, tmp)
        os.replace(tmp, path)

    def _forward(self, batch) -> torch.Tensor:
        return self.model(batch.node_kind, batch.x, batch.edge_index, batch.edge_type,
                          batch.batch, batch.program if self.use_program_features else None)

    def predict_graphs(self, graphs: list) -> np.ndarray:
        """Latency in seconds for each `ProgramGraph`."""
        return self.predict_and_embed(graphs)[0]

    @torch.no_grad()
    def predict_and_embed(self, graphs) -> tuple[np.ndarray, np.ndarray]:
        """Latency in seconds and the network's graph embedding (the head's input) per graph.

        `graphs` may be any iterable (e.g. `Featurizer.iter_featurize`): batches of
        PREDICT_BATCH are scored as soon as they are there.
        """
        from torch_geometric.data import Batch

        self.model.eval()
        seconds, embeddings = [], []
        graphs = iter(graphs)
        while chunk := list(itertools.islice(graphs, PREDICT_BATCH)):
            batch = Batch.from_data_list([self.normalization.data(g) for g in chunk])
            emb = self.model.embed(batch.node_kind, batch.x, batch.edge_index, batch.edge_type,
                                   batch.batch,
                                   batch.program if self.use_program_features else None)
            seconds.append(self.normalization.latency(self.model.head(emb).squeeze(-1),
                                                      batch.offset))
            embeddings.append(emb.numpy())
        if not seconds:
            return np.zeros(0), np.zeros((0, self.model.head[0].in_features))
        return np.concatenate(seconds), np.concatenate(embeddings)

    def adapt(self, graphs: list, latencies, groups, steps: int, lr: float) -> float:
        """Fine-tune on measured programs (full-batch Adam, MSE + rank loss); the last loss.

        Args:
            graphs: `ProgramGraph`s of measured programs.
            latencies: their measured latencies, seconds.
            groups: an integer per program: programs of one workload share it.
            steps: optimiser steps.
            lr: learning rate.
        """
        from torch_geometric.data import Batch

        from costmodel.losses import cost_model_loss

        batch = Batch.from_data_list([self.normalization.data(g, lat, grp)
                                      for g, lat, grp in zip(graphs, latencies, groups)])
        optimizer = torch.optim.Adam(self.model.parameters(), lr=lr)
        self.model.train()
        loss = torch.zeros(())
        for _ in range(steps):
            optimizer.zero_grad()
            loss, _ = cost_model_loss(self._forward(batch), batch.y, batch.group,
                                      self.hparams["mse_weight"], self.hparams["rank_weight"],
                                      self.hparams["rank_loss"])
            loss.backward()
            optimizer.step()
        self.model.eval()
        return float(loss.detach())

    def predict(self, schedules: list) -> np.ndarray:
        """Latency in seconds for scheduled IRModules or `tvm.s_tir.Schedule`s."""
        return self.score_schedules(schedules)[0]

    def score_schedules(self, schedules: list) -> tuple[np.ndarray, np.ndarray]:
        """`predict_and_embed` of scheduled programs, scoring batches while later ones lower.

        Meanwhile the network runs on one thread: idle torch workers spin and would take the
        cores from the lowering threads (on 2 cores this scores about a third more per second).
        """
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return self.predict_and_embed(self.featurizer.iter_featurize(schedules))
        finally:
            torch.set_num_threads(threads)

    def predict_records(self, frame) -> np.ndarray:
        """Latency in seconds for the rows of a dataset frame (workload_ir, trace, trace_hash)."""
        graphs = [self.featurizer.featurize_record(r.workload_ir, r.trace, r.trace_hash)
                  for r in frame.itertuples(index=False)]
        return self.predict_graphs(graphs)
