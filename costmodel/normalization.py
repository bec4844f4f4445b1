"""Standardisation of graphs and targets, fitted on a training split and kept with the model."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import torch

EPS = 1e-6
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

    @classmethod
    def fit(cls, graphs, latencies) -> "Normalization":
        x = np.concatenate([g.x for g in graphs])
        prog = np.stack([g.program for g in graphs])
        y = np.log(np.asarray(latencies, float))
        return cls(x.mean(0), x.std(0) + EPS, prog.mean(0), prog.std(0) + EPS,
                   float(y.mean()), float(y.std() + EPS))

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
        if latency is not None:
            data.y = torch.tensor([(math.log(latency) - self.y_mean) / self.y_std])
        data.group = torch.tensor([group])
        return data

    def latency(self, pred: torch.Tensor) -> np.ndarray:
        """Seconds from normalised log-latency predictions."""
        normalized = np.clip(pred.detach().cpu().numpy().astype(np.float64), -MAX_Z, MAX_Z)
        return np.exp(normalized * self.y_std + self.y_mean)
