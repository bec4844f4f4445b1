"""Standardisation of graphs and targets, fitted on a training split and kept with the model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

EPS = 1e-6
FLOPS_FEATURE = 0  # PROGRAM_FEATURES[0] is log2(1 + FLOPs)
# predictions beyond this many training standard deviations are clipped (far extrapolation)
MAX_Z = 10.0


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

    @classmethod
    def fit(cls, graphs, latencies, per_flop: bool = False) -> "Normalization":
        """Statistics of `graphs`; targets are log-latency, per FLOP if `per_flop`."""
        x = np.concatenate([g.x for g in graphs])
        prog = np.stack([g.program for g in graphs])
        y = np.log(np.asarray(latencies, float))
        if per_flop:
            y = y - prog[:, FLOPS_FEATURE] * math.log(2)
        return cls(x.mean(0), x.std(0) + EPS, prog.mean(0), prog.std(0) + EPS,
                   float(y.mean()), float(y.std() + EPS), per_flop)

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

    def data(self, graph, latency: float | None = None, group: int = 0):
        """A normalised `torch_geometric.data.Data` for one graph (y: normalised log-latency)."""
        data = graph.to_pyg()
        data.x = (data.x - torch.from_numpy(self.x_mean)) / torch.from_numpy(self.x_std)
        data.program = (data.program - torch.from_numpy(self.program_mean)) \
            / torch.from_numpy(self.program_std)
        data.x, data.program = data.x.float(), data.program.float()
        data.offset = torch.tensor([self.offset(graph)])
        if latency is not None:
            data.y = torch.tensor([(math.log(latency) - data.offset.item() - self.y_mean)
                                   / self.y_std])
        data.group = torch.tensor([group])
        return data

    def log_latency(self, pred: torch.Tensor, offset: torch.Tensor) -> np.ndarray:
        """Natural-log seconds from normalised predictions and the graphs' `offset`s."""
        normalized = np.clip(pred.detach().cpu().numpy().astype(np.float64), -MAX_Z, MAX_Z)
        return normalized * self.y_std + self.y_mean + offset.cpu().numpy().astype(np.float64)

    def latency(self, pred: torch.Tensor, offset: torch.Tensor) -> np.ndarray:
        """Seconds from normalised predictions and the graphs' `offset`s."""
        return np.exp(self.log_latency(pred, offset))
