"""The LightningModule: loss, optimiser and metrics around a plain network of `costmodel.model`."""

from __future__ import annotations

import lightning as L
import numpy as np
import torch

from costmodel import checkpoint, featurize
from costmodel.losses import RANK_LOSSES, cost_model_loss
from costmodel.model import MODELS
from training.metrics import kendall_tau


class CostModelModule(L.LightningModule):
    """Trains a cost model with MSE on the normalised target (log-latency, standardised over
    the training split or within each workload) plus a rank loss within workloads.

    Args:
        architecture: the network, a name in `costmodel.model.MODELS`.
        hidden: width of node embeddings.
        num_layers: message-passing layers.
        dropout: dropout in the head.
        use_program_features: feed whole-program features (FLOPs, bytes, ...) to the head.
        lr: AdamW learning rate.
        weight_decay: AdamW weight decay.
        mse_weight: weight of the MSE term.
        rank_weight: weight of the rank term.
        rank_loss: a name in `costmodel.losses.RANK_LOSSES`: pairwise "logistic" (RankNet) or
            "hinge", listwise "listmle", or "lambdarank" (logistic pairs weighted by their
            |delta NDCG|).
    """

    def __init__(self, architecture: str = "graphsage", hidden: int = 128, num_layers: int = 3, dropout: float = 0.1,
                 use_program_features: bool = True, lr: float = 1e-3,
                 weight_decay: float = 1e-4, mse_weight: float = 1.0, rank_weight: float = 1.0,
                 rank_loss: str = "logistic"):
        super().__init__()
        RANK_LOSSES.get(rank_loss)  # an unknown name fails here, before any data is read
        self.save_hyperparameters()
        self.model = MODELS.create(
            architecture, num_node_kinds=len(featurize.VOCABULARY),
            num_node_features=featurize.NUM_NODE_FEATURES,
            num_edge_types=len(featurize.EDGE_TYPES),
            num_program_features=featurize.NUM_PROGRAM_FEATURES if use_program_features else 0,
            hidden=hidden, num_layers=num_layers, dropout=dropout)
        self._eval_outputs: list[tuple[np.ndarray, ...]] = []

    def forward(self, batch) -> torch.Tensor:
        program = batch.program if self.hparams.use_program_features else None
        return self.model(batch.node_kind, batch.x, batch.edge_index, batch.edge_type,
                          batch.batch, program)

    def training_step(self, batch, batch_idx):
        pred = self(batch)
        loss, parts = cost_model_loss(pred, batch.y, batch.group, self.hparams.mse_weight,
                                      self.hparams.rank_weight, self.hparams.rank_loss)
        self.log_dict({"train/loss": loss, "train/mse": parts["mse"],
                       "train/rank": parts["rank"]}, batch_size=batch.num_graphs,
                      prog_bar=True, sync_dist=True)
        return loss

    def eval_step(self, batch, prefix: str) -> None:
        pred = self(batch)
        loss, _ = cost_model_loss(pred, batch.y, batch.group, self.hparams.mse_weight,
                                  self.hparams.rank_weight, self.hparams.rank_loss)
        self.log(f"{prefix}/loss", loss, batch_size=batch.num_graphs, sync_dist=True)
        # rank by log-latency: add back what a per-FLOP target leaves out
        norm = self.trainer.datamodule.normalization
        offset = batch.offset.cpu().numpy() / norm.y_std
        self._eval_outputs.append((batch.group.cpu().numpy(), batch.y.cpu().numpy() + offset,
                                   pred.detach().cpu().numpy() + offset))

    def _eval_epoch_end(self, prefix: str) -> None:
        if self._eval_outputs:
            group, y, pred = (np.concatenate(a) for a in zip(*self._eval_outputs))
            self.log(f"{prefix}/kendall_tau", kendall_tau(group, np.exp(y), pred),
                     sync_dist=True)
        self._eval_outputs.clear()

    def validation_step(self, batch, batch_idx):
        self.eval_step(batch, "val")

    def test_step(self, batch, batch_idx):
        self.eval_step(batch, "test")

    def on_validation_epoch_end(self):
        self._eval_epoch_end("val")

    def on_test_epoch_end(self):
        self._eval_epoch_end("test")

    def configure_optimizers(self):
        return torch.optim.AdamW(self.parameters(), lr=self.hparams.lr,
                                 weight_decay=self.hparams.weight_decay)

    def on_save_checkpoint(self, ckpt: dict) -> None:
        """Make the checkpoint self-describing (`costmodel.checkpoint` reads it back)."""
        data = self.trainer.datamodule
        ckpt[checkpoint.META_KEY] = checkpoint.describe(
            self.model, data.normalization, data.frames["train"].target.iloc[0],
            data.hparams.dataset, data.hparams.split, data.sides)
