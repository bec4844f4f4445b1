"""Standardisation of graphs and targets, fitted on a training split and kept with the model.

The target is log-latency (less the log FLOPs if `per_flop`), standardised either over the
whole training split (the model predicts a latency) or, if `per_workload`, within each
workload over that workload's records (the model predicts a relative score: how much faster
or slower than its workload's typical program, not a latency).
"""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pandas as pd
import torch

EPS = 1e-6
FLOPS_FEATURE = 0  # PROGRAM_FEATURES[0] is log2(1 + FLOPs)
# predictions beyond this many training standard deviations are clipped (far extrapolation)
MAX_Z = 10.0


def varied(std: np.ndarray) -> np.ndarray:
    """Which features varied in the data their standard deviations `std` were fitted on
    (`Normalization.fit` adds EPS, so a constant feature has exactly EPS)."""
    return np.asarray(std, np.float64) > 2 * EPS


@dataclasses.dataclass
class Normalization:
    """Standardisation fitted on the training split; stored in checkpoints."""

    x_mean: np.ndarray
    x_std: np.ndarray
    program_mean: np.ndarray
    program_std: np.ndarray
    y_mean: float
    y_std: float
    per_flop: bool = False
    per_workload: bool = False  # absent from checkpoints written before it existed: False
    # store features (`ProgramGraph.store_x`), for models that read them; None: none
    store_mean: np.ndarray | None = None
    store_std: np.ndarray | None = None
    # trace token features (`ProgramGraph.trace_x`), likewise
    trace_mean: np.ndarray | None = None
    trace_std: np.ndarray | None = None
    # warp access features (`ProgramGraph.warp_x`), likewise; `data` appends them to `x`
    warp_mean: np.ndarray | None = None
    warp_std: np.ndarray | None = None

    @classmethod
    def fit(cls, graphs, latencies, per_flop: bool = False,
            workloads=None) -> "Normalization":
        """Statistics of `graphs`; targets are log-latency, per FLOP if `per_flop`.

        With `workloads` (the workload of each record), targets are standardised within each
        workload (`per_workload`); `y_mean` is then 0 and `y_std` the pooled within-workload
        standard deviation of the training records, so that a prediction maps to a log-latency
        relative to its workload's mean (`log_latency`), in the units of a typical workload.
        Graphs with store features (`store_x`), trace tokens (`trace_x`) or warp features
        (`warp_x`) standardise those too.
        """
        graphs = list(graphs)
        x = np.concatenate([g.x for g in graphs])
        prog = np.stack([g.program for g in graphs])
        y = np.log(np.asarray(latencies, float))
        if per_flop:
            y = y - prog[:, FLOPS_FEATURE] * math.log(2)
        y_mean, y_std = _target_statistics(y, workloads)
        return cls(x.mean(0), x.std(0) + EPS, prog.mean(0), prog.std(0) + EPS,
                   y_mean, y_std, per_flop, workloads is not None,
                   *_row_statistics(graphs, "store_x"), *_row_statistics(graphs, "trace_x"),
                   *_row_statistics(graphs, "warp_x"))

    def refit_targets(self, graphs, latencies, workloads=None) -> "Normalization":
        """A copy whose target statistics (`y_mean`, `y_std`) are fitted on these records (as
        `fit` does; pass `workloads` if this one is `per_workload`), the input statistics
        kept: for records of another target trained beside the fitted ones, whose latencies
        share no scale with theirs."""
        y = np.log(np.asarray(latencies, float)) - np.array([self.offset(g) for g in graphs])
        y_mean, y_std = _target_statistics(y, workloads if self.per_workload else None)
        return dataclasses.replace(self, y_mean=y_mean, y_std=y_std)

    @property
    def predicts_latency(self) -> bool:
        """False when the model learnt a score relative to each workload (`per_workload`):
        its predictions rank a workload's programs but are no latency."""
        return not self.per_workload

    def with_inputs_of(self, source: "Normalization") -> "Normalization":
        """These statistics with the input (node and program feature) standardisation of
        `source`, the normalisation a network was pretrained with, for fine-tuning it on other
        data (`--model.init_from`).

        A pretrained network's first layers learnt weights for its inputs as `source`
        standardised them; standardising new data with its own statistics would shift and
        rescale every input under those weights. So every feature that varied in the source's
        training data keeps the source's mean and standard deviation. A feature that was
        constant there (its standard deviation at the EPS floor, e.g. thread bindings and
        shared memory in CPU programs) taught the network nothing: dividing by EPS would blow
        its new values up a million-fold, so it takes these statistics instead. The target
        statistics (`y_mean`, `y_std`, `per_flop`, `per_workload`) stay these: latencies of
        another target (a GPU) have another scale, and the head is fine-tuned to it.
        """
        x, prog = varied(source.x_std), varied(source.program_std)

        def pick(mask, theirs, ours):
            return np.where(mask, theirs, ours).astype(np.asarray(ours).dtype)

        rows = {}
        for view in ("store", "trace", "warp"):
            theirs, ours = getattr(source, f"{view}_std"), getattr(self, f"{view}_std")
            if theirs is not None and ours is not None:
                mask = varied(theirs)
                rows[f"{view}_mean"] = pick(mask, getattr(source, f"{view}_mean"),
                                            getattr(self, f"{view}_mean"))
                rows[f"{view}_std"] = pick(mask, theirs, ours)
        return dataclasses.replace(
            self, x_mean=pick(x, source.x_mean, self.x_mean),
            x_std=pick(x, source.x_std, self.x_std),
            program_mean=pick(prog, source.program_mean, self.program_mean),
            program_std=pick(prog, source.program_std, self.program_std), **rows)

    def offset(self, graph) -> float:
        """What the target leaves out of a graph's log-latency: its log FLOPs if per FLOP."""
        return float(graph.program[FLOPS_FEATURE]) * math.log(2) if self.per_flop else 0.0

    def to_dict(self) -> dict:
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v)
                for k, v in dataclasses.asdict(self).items()}

    @classmethod
    def from_dict(cls, d: dict) -> "Normalization":
        return cls(**{k: (np.asarray(v, np.float32) if isinstance(v, list) else v)
                      for k, v in d.items()})

    def targets(self, graphs, latencies, workloads) -> np.ndarray:
        """The normalised training target of each record: its log-latency (less its `offset`)
        standardised with (`y_mean`, `y_std`), or, if `per_workload`, with the mean and standard
        deviation of the records of its workload among those given."""
        y = np.log(np.asarray(latencies, float)) - np.array([self.offset(g) for g in graphs])
        if not self.per_workload:
            return (y - self.y_mean) / self.y_std
        by = pd.Series(y).groupby(np.asarray(workloads))
        mean = by.transform("mean").to_numpy()
        std = by.transform(lambda v: v.std(ddof=0)).to_numpy()
        return (y - mean) / (std + EPS)

    def data(self, graph, *, y: float | None = None, group: int = 0):
        """A normalised `torch_geometric.data.Data` for one graph, with its normalised target
        `y` (from `targets`) if given."""
        data = graph.to_pyg()
        data.x = (data.x - torch.from_numpy(self.x_mean)) / torch.from_numpy(self.x_std)
        data.program = (data.program - torch.from_numpy(self.program_mean)) \
            / torch.from_numpy(self.program_std)
        data.x, data.program = data.x.float(), data.program.float()
        if self.store_mean is not None:
            if graph.store_x is None:
                raise ValueError("this normalisation standardises store features, and the graph "
                                 "has none: featurise with Featurizer(stores=True)")
            data.store_x = ((data.store_x - torch.from_numpy(self.store_mean))
                            / torch.from_numpy(self.store_std)).float()
        elif graph.store_x is not None:  # a model without store features: leave them out
            del data.store_x, data.store_count
        if self.trace_mean is not None:
            if graph.trace_x is None:
                raise ValueError("this normalisation standardises trace tokens, and the graph "
                                 "has none: featurise with Featurizer(traces=True)")
            data.trace_x = ((data.trace_x - torch.from_numpy(self.trace_mean))
                            / torch.from_numpy(self.trace_std)).float()
        elif graph.trace_x is not None:  # a model without the trace view: leave it out
            del data.trace_kind, data.trace_x, data.trace_count
        if self.warp_mean is not None:  # the model reads them as more node features
            if graph.warp_x is None:
                raise ValueError("this normalisation standardises warp features, and the graph "
                                 "has none: featurise with Featurizer(warps=True)")
            warp = (data.warp_x - torch.from_numpy(self.warp_mean)) \
                / torch.from_numpy(self.warp_std)
            data.x = torch.cat([data.x, warp.float()], dim=1)
        if graph.warp_x is not None:
            del data.warp_x
        data.offset = torch.tensor([self.offset(graph)])
        if y is not None:
            data.y = torch.tensor([float(y)])
        data.group = torch.tensor([group])
        return data

    def log_latency(self, pred: torch.Tensor, offset: torch.Tensor) -> np.ndarray:
        """Natural-log seconds from normalised predictions and the graphs' `offset`s.

        For a `per_workload` model this is not a latency but log(latency / the workload's
        geometric-mean latency) in a typical workload's units: it ranks the programs of one
        workload and says nothing about their absolute time.
        """
        normalized = np.clip(pred.detach().cpu().numpy().astype(np.float64), -MAX_Z, MAX_Z)
        return normalized * self.y_std + self.y_mean + offset.cpu().numpy().astype(np.float64)

    def latency(self, pred: torch.Tensor, offset: torch.Tensor) -> np.ndarray:
        """Seconds from normalised predictions and the graphs' `offset`s."""
        return np.exp(self.log_latency(pred, offset))


def _target_statistics(y: np.ndarray, workloads=None) -> tuple[float, float]:
    """(y_mean, y_std) of log-latencies `y`: over all of them, or with `workloads`, 0 and the
    pooled within-workload standard deviation."""
    if workloads is None:
        return float(y.mean()), float(y.std() + EPS)
    residual = y - pd.Series(y).groupby(np.asarray(workloads)).transform("mean").to_numpy()
    return 0.0, float(np.sqrt(np.mean(residual ** 2)) + EPS)


def _row_statistics(graphs, name: str) -> tuple[np.ndarray | None, np.ndarray | None]:
    """Mean and standard deviation (+ EPS) of the rows of every graph's `name` (store_x,
    trace_x, warp_x); (None, None) unless every graph has them; mean 0 and std 1 if none has
    a row."""
    if not graphs or any(getattr(g, name) is None for g in graphs):
        return None, None
    rows = np.concatenate([getattr(g, name) for g in graphs])
    if not len(rows):
        return np.zeros(rows.shape[1], np.float32), np.ones(rows.shape[1], np.float32)
    return rows.mean(0), rows.std(0) + EPS
