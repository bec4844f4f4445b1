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

from costmodel import views

EPS = 1e-6
FLOPS_FEATURE = 0  # PROGRAM_FEATURES[0] is log2(1 + FLOPs)
# predictions beyond this many training standard deviations are clipped (far extrapolation)
MAX_Z = 10.0


def varied(std: np.ndarray) -> np.ndarray:
    """Which features varied in the data their standard deviations `std` were fitted on
    (`Normalization.fit` adds EPS, so a constant feature has exactly EPS)."""
    return np.asarray(std, np.float64) > 2 * EPS


@dataclasses.dataclass(init=False)
class Normalization:
    """Standardisation fitted on the training split; stored in checkpoints.

    Beside the node and program features and the target it keeps the mean and standard
    deviation of the rows of each optional view it was fitted with (`costmodel.views`: the
    view's `statistics` name them, e.g. `store_mean` and `store_std` for `ProgramGraph.store_x`,
    `trace_*` for `trace_x`, `warp_*` for `warp_x`, whose standardised rows `data` appends to
    `x`), for models that read them. They are keyword arguments and attributes of these names
    (None: the view was not fitted, and a model reading it cannot use this normalisation), and
    entries of the checkpoint's dict; `view_statistics` holds those that are there.
    """

    x_mean: np.ndarray
    x_std: np.ndarray
    program_mean: np.ndarray
    program_std: np.ndarray
    y_mean: float
    y_std: float
    per_flop: bool = False
    per_workload: bool = False  # absent from checkpoints written before it existed: False
    view_statistics: dict[str, np.ndarray] = dataclasses.field(default_factory=dict)

    def __init__(self, x_mean: np.ndarray, x_std: np.ndarray, program_mean: np.ndarray,
                 program_std: np.ndarray, y_mean: float, y_std: float, per_flop: bool = False,
                 per_workload: bool = False,
                 view_statistics: dict[str, np.ndarray] | None = None,
                 **statistics: np.ndarray | None):
        self.x_mean, self.x_std = x_mean, x_std
        self.program_mean, self.program_std = program_mean, program_std
        self.y_mean, self.y_std = y_mean, y_std
        self.per_flop, self.per_workload = per_flop, per_workload
        if unknown := sorted(set(statistics) - set(_view_statistics())):
            raise TypeError(f"Normalization.__init__() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        merged = {**(view_statistics or {}), **statistics}  # a keyword None clears one
        self.view_statistics = {k: v for k, v in merged.items() if v is not None}

    def __getattr__(self, name: str):
        """A view's statistics by name (`store_mean`, ...); None where it was not fitted."""
        if name in _view_statistics():
            return self.__dict__.get("view_statistics", {}).get(name)
        raise AttributeError(f"'Normalization' object has no attribute {name!r}")

    @classmethod
    def fit(cls, graphs, latencies, per_flop: bool = False,
            workloads=None) -> "Normalization":
        """Statistics of `graphs`; targets are log-latency, per FLOP if `per_flop`.

        With `workloads` (the workload of each record), targets are standardised within each
        workload (`per_workload`); `y_mean` is then 0 and `y_std` the pooled within-workload
        standard deviation of the training records, so that a prediction maps to a log-latency
        relative to its workload's mean (`log_latency`), in the units of a typical workload.
        Graphs with the rows of an optional view (`store_x`, `trace_x`, `warp_x`: `View.rows`)
        standardise those too.
        """
        graphs = list(graphs)
        x = np.concatenate([g.x for g in graphs])
        prog = np.stack([g.program for g in graphs])
        y = np.log(np.asarray(latencies, float))
        if per_flop:
            y = y - prog[:, FLOPS_FEATURE] * math.log(2)
        y_mean, y_std = _target_statistics(y, workloads)
        rows = {}
        for view in views.optional():
            rows.update(zip(view.statistics, _row_statistics(graphs, view.rows)))
        return cls(x.mean(0), x.std(0) + EPS, prog.mean(0), prog.std(0) + EPS,
                   y_mean, y_std, per_flop, workloads is not None, **rows)

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
        def pick(mask, theirs, ours):
            return np.where(mask, theirs, ours).astype(np.asarray(ours).dtype)

        inputs = {}
        for view in views.VIEWS:  # the graph's and the program's, then the optional views'
            mean, std = view.statistics
            theirs, ours = getattr(source, std), getattr(self, std)
            if theirs is not None and ours is not None:
                mask = varied(theirs)
                inputs[mean] = pick(mask, getattr(source, mean), getattr(self, mean))
                inputs[std] = pick(mask, theirs, ours)
        return dataclasses.replace(self, **inputs)

    def offset(self, graph) -> float:
        """What the target leaves out of a graph's log-latency: its log FLOPs if per FLOP."""
        return float(graph.program[FLOPS_FEATURE]) * math.log(2) if self.per_flop else 0.0

    def to_dict(self) -> dict:
        """The checkpoint's dict: every field, then every optional view's statistics (None
        where not fitted)."""
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)
                  if f.name != "view_statistics"}
        fields.update({k: self.view_statistics.get(k) for k in _view_statistics()})
        return {k: (v.tolist() if isinstance(v, np.ndarray) else v) for k, v in fields.items()}

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
        for view in views.VIEWS:  # the graph's and the program's, then the optional views'
            mean, std = (getattr(self, k) for k in view.statistics)
            has_rows = getattr(graph, view.rows) is not None
            if mean is not None:
                if not has_rows:
                    raise ValueError(f"this normalisation standardises {view.label}, and the "
                                     f"graph has none: featurise with Featurizer({view.flag}=True)")
                rows = ((data[view.rows] - torch.from_numpy(mean))
                        / torch.from_numpy(std)).float()
                if view.node_features:  # the model reads them as more node features
                    data.x = torch.cat([data.x, rows], dim=1)
                else:
                    data[view.rows] = rows
            if has_rows and (mean is None or view.node_features):  # not read, or now in `x`
                for name in view.inputs:
                    delattr(data, name)
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


def _view_statistics() -> list[str]:
    """The keys of every optional view's statistics, in `costmodel.views.VIEWS` order."""
    return [k for view in views.optional() for k in view.statistics]


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
