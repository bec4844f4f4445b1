"""Training losses: MSE on the normalised target plus a rank loss within workloads.

Every rank loss in `RANK_LOSSES` maps (pred, target, group, scale) to a scalar; `group` marks
the workload of each record, and records of different workloads are never ranked against each
other (latencies of different programs are not a ranking problem); `scale` is the log-latency
(in nats) of one unit of target, read only by losses that weigh latency ratios ("regret").
Lower target and lower prediction mean faster. Pairwise losses penalise d = pred_slower -
pred_faster of each ordered same-workload pair (`pairwise_rank_loss`); listwise ones score each
workload's whole list.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from costmodel.registry import Registry

RANK_LOSSES = Registry("rank loss")
HINGE_MARGIN = 0.1


def logistic_pair_loss(diff: torch.Tensor) -> torch.Tensor:
    """log(1 + exp(-d)): RankNet's loss."""
    return F.softplus(-diff)


def hinge_pair_loss(diff: torch.Tensor) -> torch.Tensor:
    """max(0, margin - d)."""
    return F.relu(HINGE_MARGIN - diff)


def ordered_pairs(target: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """[i, j] is True when i and j share a group and j is slower (target_i < target_j)."""
    return (group[:, None] == group[None, :]) & (target[None, :] > target[:, None])


def pairwise_rank_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor,
                       penalty=logistic_pair_loss, weight: torch.Tensor | None = None
                       ) -> torch.Tensor:
    """Mean of `penalty(d)` over ordered pairs (i, j) of the same group with target_i < target_j.

    d = pred_j - pred_i: the slower one should be predicted higher. With `weight` ([N, N],
    read at the pairs), the mean is weighted. Returns 0 when the batch has no such pair.

    Shapes:
        pred, target, group: :math:`(N)`
    """
    pairs = ordered_pairs(target, group)
    if not pairs.any():
        return pred.sum() * 0.0
    loss = penalty((pred[None, :] - pred[:, None])[pairs])
    if weight is None:
        return loss.mean()
    w = weight[pairs]
    return (w * loss).sum() / w.sum()


@RANK_LOSSES.register("logistic")
def logistic_rank_loss(pred, target, group, scale: float = 1.0) -> torch.Tensor:
    """RankNet: mean over same-workload pairs of log(1 + exp(-d))."""
    return pairwise_rank_loss(pred, target, group, logistic_pair_loss)


@RANK_LOSSES.register("hinge")
def hinge_rank_loss(pred, target, group, scale: float = 1.0) -> torch.Tensor:
    """Mean over same-workload pairs of max(0, margin - d)."""
    return pairwise_rank_loss(pred, target, group, hinge_pair_loss)


def _workloads(group: torch.Tensor):
    """Index tensors of each group's records, for groups of at least two."""
    for g in torch.unique(group):
        idx = torch.nonzero(group == g).squeeze(1)
        if len(idx) > 1:
            yield idx


@RANK_LOSSES.register("listmle")
def listmle_loss(pred, target, group, scale: float = 1.0) -> torch.Tensor:
    """ListMLE: negative log-likelihood of each workload's true order (fastest first) under a
    Plackett-Luce model with scores -pred.

    Per workload of n records in true order pi: (1 / (n - 1)) * sum_{k < n} [log sum_{m >= k}
    exp(-pred_pi(m)) + pred_pi(k)] (the last term is always 0, so a pair gives exactly
    RankNet's logistic loss); averaged over the workloads with at least two records. Returns 0
    when there are none.
    """
    losses = []
    for idx in _workloads(group):
        order = idx[torch.argsort(target[idx], stable=True)]
        score = -pred[order]
        tail = torch.logcumsumexp(score.flip(0), 0).flip(0)  # log sum_{m >= k} exp(score_m)
        losses.append((tail - score).sum() / (len(idx) - 1))
    return torch.stack(losses).mean() if losses else pred.sum() * 0.0


def delta_ndcg(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor) -> torch.Tensor:
    """|change of its workload's NDCG| when records i and j swap places, for every [i, j].

    Relevance is the rank of the true latency within the workload: n - 1 for the fastest of
    its n records, 0 for the slowest (the gain is the relevance). The predicted order sorts by
    prediction, lowest (fastest) first, with discount 1 / log2(2 + position). Pairs across
    workloads are 0. No gradient flows through it.
    """
    n = len(pred)
    out = torch.zeros(n, n, dtype=pred.dtype, device=pred.device)
    for idx in _workloads(group):
        k = len(idx)
        ranks = torch.empty(k, dtype=pred.dtype, device=pred.device)
        ranks[torch.argsort(target[idx], stable=True)] = torch.arange(
            k, dtype=pred.dtype, device=pred.device)
        gain = (k - 1) - ranks
        position = torch.empty_like(ranks)
        position[torch.argsort(pred[idx].detach(), stable=True)] = torch.arange(
            k, dtype=pred.dtype, device=pred.device)
        discount = 1.0 / torch.log2(2.0 + position)
        ideal = (torch.sort(gain, descending=True).values
                 / torch.log2(2.0 + torch.arange(k, dtype=pred.dtype, device=pred.device))).sum()
        delta = (gain[:, None] - gain[None, :]).abs() \
            * (discount[:, None] - discount[None, :]).abs() / ideal
        out[idx[:, None], idx[None, :]] = delta
    return out


@RANK_LOSSES.register("lambdarank")
def lambdarank_loss(pred, target, group, scale: float = 1.0) -> torch.Tensor:
    """LambdaRank-style: RankNet's log(1 + exp(-d)) per same-workload pair, weighted by the
    pair's |delta NDCG| (`delta_ndcg`), so misorders near the predicted top weigh most; the
    weighted mean over pairs."""
    return pairwise_rank_loss(pred, target, group, logistic_pair_loss,
                              weight=delta_ndcg(pred, target, group))


@RANK_LOSSES.register("regret")
def regret_rank_loss(pred, target, group, scale: float = 1.0) -> torch.Tensor:
    """RankNet's log(1 + exp(-d)) per same-workload pair, weighted by what the misorder costs a
    tuner that measures the predicted best: thr_i - thr_j for i faster than j, where thr is
    TenSet's normalised throughput within the batch (the workload's best latency in the batch
    over the record's own, exp(-(target - its workload's lowest target) * scale)). Pairs of two
    slow programs weigh almost nothing; a pair with the workload's best weighs the most. No
    gradient flows through the weights.
    """
    t = target.detach()
    _, index = torch.unique(group, return_inverse=True)
    lowest = torch.full((int(index.max()) + 1,), float("inf"), dtype=t.dtype, device=t.device)
    lowest = lowest.scatter_reduce(0, index, t, reduce="amin")
    throughput = torch.exp(-(t - lowest[index]) * scale)
    return pairwise_rank_loss(pred, target, group, logistic_pair_loss,
                              weight=throughput[:, None] - throughput[None, :])


def rank_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor,
              kind: str = "logistic", scale: float = 1.0) -> torch.Tensor:
    """The `RANK_LOSSES` entry `kind` of a batch; `scale`: nats of log-latency per unit of
    target (the target's standard deviation, `Normalization.y_std`).

    Raises:
        UserError: `kind` is not a registered rank loss.
    """
    return RANK_LOSSES.get(kind)(pred, target, group, scale=scale)


def cost_model_loss(pred: torch.Tensor, target: torch.Tensor, group: torch.Tensor,
                    mse_weight: float = 1.0, rank_weight: float = 1.0,
                    rank_kind: str = "logistic", scale: float = 1.0
                    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """mse_weight * MSE(pred, target) + rank_weight * rank loss `rank_kind` (`scale` as for
    `rank_loss`); also the parts."""
    mse = F.mse_loss(pred, target)
    rank = rank_loss(pred, target, group, rank_kind, scale)
    return mse_weight * mse + rank_weight * rank, {"mse": mse.detach(), "rank": rank.detach()}
