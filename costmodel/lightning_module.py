"""The LightningModule: loss, optimiser and metrics around a plain network of `costmodel.model`."""

from __future__ import annotations

import lightning as L
import numpy as np
import torch

from costmodel import checkpoint
from costmodel import views as feature_views
from costmodel.losses import RANK_LOSSES, cost_model_loss
from costmodel.model import MODELS, READOUTS, batch_inputs
from datagen.errors import UserError
from costmodel.metrics import kendall_tau, top_k_score


LR_SCHEDULES = ("constant", "cosine")
# the option of `train fit` that sets each architecture argument
ARCHITECTURE_OPTIONS = {"name": "--model.architecture", "hidden": "--model.hidden",
                        "num_layers": "--model.num_layers", "dropout": "--model.dropout",
                        "num_program_features": "--model.use_program_features",
                        "readout": "--model.readout",
                        # an optional view's sizes: --model.views; its options: view_options
                        **{k: "--model.views" for view in feature_views.optional()
                           for k in view.sizes},
                        **{k: "--model.view_options" for view in feature_views.optional()
                           for k in view.options}}


def check_same_architecture(path: str, theirs: dict, ours: dict) -> None:
    """A checkpoint's weights start a model only of its own architecture, or of the same one
    with more node features from views it never read (`widen_with_node_features`).

    Raises:
        UserError: one line naming each argument that differs, with both values.
    """
    widens = {k for view in feature_views.optional()
              if view.node_features and not view.reads(theirs)
              for k in (*view.sizes, *view.options)}
    differ = [k for k in sorted(set(theirs) | set(ours)) if theirs.get(k) != ours.get(k)
              and not (k in widens and not theirs.get(k))
              and k != "num_heads"]  # `match_heads` maps a source's heads onto ours
    if differ:
        cells = "; ".join(f"{k} {theirs.get(k)} there, {ours.get(k)} here"
                          + (f" ({ARCHITECTURE_OPTIONS[k]})" if k in ARCHITECTURE_OPTIONS else "")
                          for k in differ)
        raise UserError(f"init_from {path} has another architecture: {cells}; train with its "
                        "values to start from it")


def widen_with_node_features(state: dict, theirs: dict, ours: dict) -> dict:
    """A source network's parameters for a model that also reads views of more node features
    (`View.node_features`: warp features, for a CPU model that read none): the node
    projection gains a zero column per feature it never read, where the normalisation puts
    that view's features, so the widened network starts out predicting exactly what the
    source predicts and learns what the new features are worth."""
    weight = state["feature_proj.weight"]
    at = theirs["num_node_features"]
    columns, widened = [weight[:, :at]], False
    for view in feature_views.optional():  # in the order the normalisation appends them to `x`
        if not (view.node_features and view.reads(ours)):
            continue
        width = ours[next(iter(view.sizes))]
        if view.reads(theirs):
            columns.append(weight[:, at:at + width])
            at += width
        else:
            columns.append(weight.new_zeros(weight.shape[0], width))
            widened = True
    return {**state, "feature_proj.weight": torch.cat(columns, dim=1)} if widened else state


def match_heads(state: dict, theirs: dict, ours: dict) -> dict:
    """A source network's parameters for a model with another number of heads (`joint_head`).

    Heads both have keep the source's weights; each head the model has beyond the source's
    starts as a copy of the source's own head, so the other target's records start where the
    source left them (fine-tuning beside the source's own records); the heads of other targets
    that the source has beyond the model's are dropped, so a model of several CPUs starts a
    model of one from its own target's head (fine-tuning cost model v3 on a new CPU)."""
    have, want = theirs.get("num_heads", 1), ours.get("num_heads", 1)
    if want > have:
        copies = {f"extra_heads.{i}.{name[len('head.'):]}": value.clone()
                  for i in range(have - 1, want - 1)
                  for name, value in state.items() if name.startswith("head.")}
        return {**state, **copies}
    return {name: value for name, value in state.items()
            if not name.startswith("extra_heads.") or int(name.split(".")[1]) < want - 1}


class CostModelModule(L.LightningModule):
    """Trains a cost model with MSE on the normalised target (log-latency, standardised over
    the training split or within each workload) plus a rank loss within workloads.

    Args:
        architecture: the network, a name in `costmodel.model.MODELS`.
        hidden: width of node embeddings.
        num_layers: message-passing layers.
        dropout: dropout in the head.
        readout: graph pooling, a name in `costmodel.model.READOUTS`.
        use_program_features: feed whole-program features (FLOPs, bytes, ...) to the head.
        views: the optional views the model also reads beside the graph, by name
            (`costmodel.views`): "store", MetaSchedule's per-store features of each program;
            "trace", the schedule's trace as tokens (TLP's view: each primitive and its
            decisions) through self-attention; "warp", each memory access's warp features
            (shared-memory bank conflicts, global sectors per warp) beside its node features.
            Each view's declaration says how the model reads it; `train` passes the list on
            to the data (`ScheduleDataModule.views`), which then featurises them.
        view_options: the read views' other architecture arguments by name, each at least 1
            (`View.options`; e.g. `trace_layers`, the self-attention layers over the trace,
            1 unless given).
        joint_head: with `data.joint_dataset`, its records (other targets') train heads of
            their own on the shared layers, one per target (MTL-TLP's multi-task recipe),
            instead of sharing the model's one head; predictions always come from the model's
            own head. The model is made with one such head; more targets add theirs when
            training starts (as copies of the source's head with `init_from`).
        lr: AdamW learning rate.
        lr_schedule: "constant" (the default), or "cosine": the learning rate falls from `lr`
            to 0 along a half cosine over all of training's steps (`max_epochs`), so the last
            epochs settle instead of jumping between minima.
        weight_decay: AdamW weight decay.
        mse_weight: weight of the MSE term.
        rank_weight: weight of the rank term.
        rank_loss: a name in `costmodel.losses.RANK_LOSSES`: pairwise "logistic" (RankNet) or
            "hinge", listwise "listmle", "lambdarank" (logistic pairs weighted by their
            |delta NDCG|), or "regret" (logistic pairs weighted by their gap in normalised
            throughput, so the fast end of each workload weighs most).
        init_from: a trained checkpoint to start from instead of random weights (fine-tuning,
            e.g. a CPU model on a few GPU measurements). It is read like any checkpoint
            (`costmodel.checkpoint.load`: no code runs), may be of another target kind, and
            its architecture must be this one, except that a source without a view of node
            features (warp features) may start a model with them
            (`widen_with_node_features`), and a source of more or fewer heads a model of
            its own number (`match_heads`: a head the source lacks starts as a copy of its
            own head; one the model lacks is dropped). The data keep its input
            standardisation for every feature it saw vary, while the target statistics are
            fitted on the new training records (`Normalization.with_inputs_of` says why); the
            new checkpoint records where it started (`init_from`, `checkpoint.provenance`).
        freeze: parts of the model (its top-level modules, e.g. `layers` and `norms`, the
            message passing) whose weights stay as they start: with `init_from`, as the source
            trained them; the optimiser sees only the others (few-shot fine-tuning that
            adapts the inputs and the head). A name the model lacks is refused with its parts.
    """

    def __init__(self, architecture: str = "graphsage", hidden: int = 128, num_layers: int = 3,
                 dropout: float = 0.1, readout: str = "mean_max",
                 use_program_features: bool = True, views: list[str] | None = None,
                 view_options: dict[str, int] | None = None, lr: float = 1e-3,
                 lr_schedule: str = "constant", weight_decay: float = 1e-4,
                 mse_weight: float = 1.0, rank_weight: float = 1.0,
                 rank_loss: str = "logistic", init_from: str | None = None,
                 joint_head: bool = False, freeze: list[str] | None = None):
        super().__init__()
        RANK_LOSSES.get(rank_loss)  # an unknown name fails here, before any data is read
        if lr_schedule not in LR_SCHEDULES:
            raise UserError(f"unknown lr_schedule {lr_schedule!r}; choose one of "
                            f"{', '.join(LR_SCHEDULES)}")
        if readout not in READOUTS:
            raise UserError(f"unknown readout {readout!r}; choose one of {', '.join(READOUTS)}")
        options = dict(view_options or {})
        known = [k for view in feature_views.optional() for k in view.options]
        if unknown := sorted(set(options) - set(known)):
            raise UserError(f"view_options: no view has an option {unknown[0]!r}; "
                            f"the options: {', '.join(known) or 'none'}")
        for k, value in options.items():
            if value < 1:
                raise UserError(f"{k} must be at least 1, not {value}")
        self.save_hyperparameters()
        read = {}  # the sizes of each optional view read, and its options' values
        for view in self.read_views:
            read.update(view.sizes)
            read.update((k, options.get(k, default)) for k, default in view.options.items())
        self.model = MODELS.create(
            architecture, **feature_views.GRAPH.sizes,
            num_program_features=feature_views.PROGRAM.sizes["num_program_features"]
            if use_program_features else 0,
            hidden=hidden, num_layers=num_layers, dropout=dropout, readout=readout,
            num_heads=2 if joint_head else 1, **read)
        # with `init_from`: its normalisation and what the new checkpoint records of it
        self.source_normalization, self.source = None, None
        if init_from:
            source = checkpoint.load(init_from)
            check_same_architecture(init_from, source.model.architecture,
                                    self.model.architecture)
            theirs, ours = source.model.architecture, self.model.architecture
            self.model.load_state_dict(match_heads(widen_with_node_features(
                source.model.state_dict(), theirs, ours), theirs, ours))
            self.source_normalization = source.normalization
            self.source = checkpoint.provenance(source)
        parts = dict(self.model.named_children())
        for name in freeze or []:
            if name not in parts:
                raise UserError(f"freeze: the model has no part {name!r}; its parts: "
                                f"{', '.join(parts)}")
            parts[name].requires_grad_(False)
        self._eval_outputs: list[tuple[np.ndarray, ...]] = []

    def setup(self, stage: str) -> None:
        """With `init_from`, standardise the data's inputs as the source checkpoint did."""
        data = self.trainer.datamodule
        for view in self.read_views:
            if getattr(data.normalization, view.statistics[0]) is None:
                raise UserError(f"the {view.name} view needs data with {view.label}: list "
                                f"{view.name} in data.views (train links it to model.views)")
        if self.hparams.joint_head and not data.hparams.joint_dataset:
            raise UserError("joint_head gives another dataset's records a head of their own: "
                            "set data.joint_dataset too, or leave joint_head false")
        if self.hparams.joint_head:  # a head per target beside the model's own
            missing = len(data.joint_targets) - len(self.model.extra_heads)
            self.model.add_heads(max(0, missing), copy_head=self.source is not None)
        if self.source_normalization is not None:
            data.normalization = data.normalization.with_inputs_of(self.source_normalization)

    @property
    def read_views(self) -> list:
        """The optional views the model reads (`views`), in `costmodel.views.VIEWS` order."""
        return feature_views.named(self.hparams.views)

    def forward(self, batch) -> torch.Tensor:
        return self.model(*batch_inputs(self.model, batch), head=getattr(batch, "head", None))

    def training_step(self, batch, batch_idx):
        pred = self(batch)
        loss, parts = cost_model_loss(pred, batch.y, batch.group, self.hparams.mse_weight,
                                      self.hparams.rank_weight, self.hparams.rank_loss,
                                      self.trainer.datamodule.normalization.y_std)
        self.log_dict({"train/loss": loss, "train/mse": parts["mse"],
                       "train/rank": parts["rank"]}, batch_size=batch.num_graphs,
                      prog_bar=True, sync_dist=True)
        return loss

    def eval_step(self, batch, prefix: str) -> None:
        pred = self(batch)
        norm = self.trainer.datamodule.normalization
        loss, _ = cost_model_loss(pred, batch.y, batch.group, self.hparams.mse_weight,
                                  self.hparams.rank_weight, self.hparams.rank_loss, norm.y_std)
        self.log(f"{prefix}/loss", loss, batch_size=batch.num_graphs, sync_dist=True)
        # rank by log-latency: add back what a per-FLOP target leaves out
        offset = batch.offset.cpu().numpy() / norm.y_std
        self._eval_outputs.append((batch.group.cpu().numpy(), batch.y.cpu().numpy() + offset,
                                   pred.detach().cpu().numpy() + offset))

    def _eval_epoch_end(self, prefix: str) -> None:
        if self._eval_outputs:
            group, y, pred = (np.concatenate(a) for a in zip(*self._eval_outputs))
            norm = self.trainer.datamodule.normalization
            latency = np.exp(y * norm.y_std + norm.y_mean)  # per workload: a relative latency
            self.log(f"{prefix}/kendall_tau", kendall_tau(group, latency, pred), sync_dist=True)
            self.log(f"{prefix}/top1_score", top_k_score(group, latency, pred, 1),
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
        trained = [p for p in self.parameters() if p.requires_grad]  # not the frozen parts
        optimizer = torch.optim.AdamW(trained, lr=self.hparams.lr,
                                      weight_decay=self.hparams.weight_decay)
        if self.hparams.lr_schedule == "constant":
            return optimizer
        steps = max(1, int(self.trainer.estimated_stepping_batches))
        cosine = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, T_max=steps)
        return {"optimizer": optimizer,
                "lr_scheduler": {"scheduler": cosine, "interval": "step"}}

    def on_save_checkpoint(self, ckpt: dict) -> None:
        """Make the checkpoint self-describing (`costmodel.checkpoint` reads it back)."""
        data = self.trainer.datamodule
        ckpt[checkpoint.META_KEY] = checkpoint.describe(
            self.model, data.normalization, data.target, data.hparams.dataset,
            data.hparams.split, data.sides, init_from=self.source,
            train_share=data.train_share, joint=data.joint,
            test_dataset=data.hparams.test_dataset)
