"""Training losses: MSE on normalised log-latency plus a pairwise rank loss within workloads."""

from __future__ import annotations

import torch
import torch.nn.functional as F

from costmodel.registry import Registry

# a rank loss maps d = pred_slower - pred_faster of each same-workload pair to a penalty
RANK_LOSSES = Registry("rank loss")
HINGE_MARGIN = 0.1


@RANK_LOSSES.register("logistic")
def logistic_pair_loss(diff: torch.Tensor) -> torch.Tensor:
    """log(1 + exp(-d)): RankNet's loss."""
    return F.softplus(-diff)


@RANK_LOSSES.register("hinge")
def hinge_pair_loss(diff: torch.Tensor) -> torch.Tensor:
    """max(0, margin - d)."""
    return F.relu(HINGE_MARGIN - diff)


def pairwise_rank_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor,
                       kind: str = "logistic") -> torch.Tensor:
    """Mean loss over ordered pairs (i, j) of the same group with target_i < target_j.

    With d = pred_j - pred_i (the slower one should be predicted higher), the penalty is the
    `RANK_LOSSES` entry `kind` of d (logistic: log(1 + exp(-d)); hinge: max(0, margin - d)).
    Pairs from different groups (workloads) are never compared, because latencies of different
    programs are not a ranking problem. Returns 0 when the batch has no such pair.

    Shapes:
        pred, target, group: :math:`(N)`
    """
    penalty = RANK_LOSSES.get(kind)
    same = group[:, None] == group[None, :]
    slower = target[None, :] > target[:, None]  # [i, j]: j is slower than i
    pairs = same & slower
    if not pairs.any():
        return pred.sum() * 0.0
    diff = (pred[None, :] - pred[:, None])[pairs]
    return penalty(diff).mean()


def cost_model_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor,
                    mse_weight: float = 1.0, rank_weight: float = 1.0,
                    rank_kind: str = "logistic") -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """mse_weight * MSE(pred, target) + rank_weight * pairwise rank loss; also the parts."""
    mse = F.mse_loss(pred, target)
    rank = pairwise_rank_loss(pred, target, group, rank_kind)
    return mse_weight * mse + rank_weight * rank, {"mse": mse.detach(), "rank": rank.detach()}
