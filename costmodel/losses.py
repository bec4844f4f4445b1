"""Training losses: MSE on normalised log-latency plus a pairwise rank loss within workloads."""

from __future__ import annotations

import torch
import torch.nn.functional as F

RANK_LOSSES = ("logistic", "hinge")


def pairwise_rank_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor,
                       kind: str = "logistic", margin: float = 0.1) -> torch.Tensor:
    """Mean loss over ordered pairs (i, j) of the same group with target_i < target_j.

    With d = pred_j - pred_i (the slower one should be predicted higher), the logistic loss
    is log(1 + exp(-d)) and the hinge loss is max(0, margin - d). Pairs from different groups
    (workloads) are never compared, because latencies of different programs are not a ranking
    problem. Returns 0 when the batch has no such pair.

    Shapes:
        pred, target, group: :math:`(N)`
    """
    if kind not in RANK_LOSSES:
        raise ValueError(f"unknown rank loss {kind!r}; choose one of {', '.join(RANK_LOSSES)}")
    same = group[:, None] == group[None, :]
    slower = target[None, :] > target[:, None]  # [i, j]: j is slower than i
    pairs = same & slower
    if not pairs.any():
        return pred.sum() * 0.0
    diff = (pred[None, :] - pred[:, None])[pairs]
    if kind == "logistic":
        return F.softplus(-diff).mean()
    return F.relu(margin - diff).mean()


def cost_model_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor,
                    mse_weight: float = 1.0, rank_weight: float = 1.0,
                    rank_kind: str = "logistic") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """mse_weight * MSE(pred, target) + rank_weight * pairwise rank loss; also the parts."""
    mse = F.mse_loss(pred, target)
    rank = pairwise_rank_loss(pred, target, group, rank_kind)
    return mse_weight * mse + rank_weight * rank, {"mse": mse.detach(), "rank": rank.detach()}
