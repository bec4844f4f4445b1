"""How the field scores a cost model (see the project's METRICS notes), computed per workload.

Every function takes, for a set of workloads, the measured latency `L` and the predicted
latency `y_hat` of each candidate, grouped by `workload` (lower latency is better, so the
model's best candidate is its lowest prediction). Workload weights `w_t` default to 1.
"""

from __future__ import annotations

import numpy as np
import pandas as pd
from scipy import stats

TOP_K = (1, 5)
APEAK_K = 32


def _groups(workload, measured, predicted, weight=None) -> list[tuple]:
    frame = pd.DataFrame({"t": np.asarray(workload), "L": np.asarray(measured, float),
                          "y": np.asarray(predicted, float),
                          "w": 1.0 if weight is None else np.asarray(weight, float)})
    if not np.isfinite(frame[["L", "y"]].to_numpy()).all() or (frame.L <= 0).any():
        raise ValueError("measured latencies must be finite and positive, predictions finite")
    return [(g.L.to_numpy(), g.y.to_numpy(), float(g.w.iloc[0]))
            for _, g in frame.groupby("t", sort=True)]


def ape(workload, measured, predicted) -> float:
    """Selection regret: 100 * |sum_t L(t, argmin y_hat) - sum_t L*_t| / sum_t L*_t."""
    groups = _groups(workload, measured, predicted)
    picked = sum(L[np.argmin(y)] for L, y, _ in groups)
    best = sum(L.min() for L, _, _ in groups)
    return float(100.0 * abs(picked - best) / best)


def mape(measured, predicted) -> float:
    """100 / N * sum_i |y_hat_i - L_i| / L_i."""
    L, y = np.asarray(measured, float), np.asarray(predicted, float)
    return float(100.0 * np.mean(np.abs(y - L) / L))


def kendall_tau(workload, measured, predicted) -> float:
    """Mean over workloads of Kendall's tau-b between predicted and measured latency.

    tau_b = (C - D) / sqrt((n0 - n1)(n0 - n2)); workloads with fewer than 2 candidates or a
    constant side are skipped.
    """
    taus = []
    for L, y, _ in _groups(workload, measured, predicted):
        if len(L) < 2 or np.ptp(L) == 0 or np.ptp(y) == 0:
            continue
        taus.append(stats.kendalltau(y, L).statistic)
    return float(np.mean(taus)) if taus else float("nan")


def opa(workload, measured, predicted) -> float:
    """Ordered pair accuracy C / (C + D) over the pairs of each workload, pooled.

    A pair is concordant when the faster candidate also has the lower prediction; pairs tied
    in either measurement or prediction count as neither.
    """
    concordant = discordant = 0
    for L, y, _ in _groups(workload, measured, predicted):
        dl = np.sign(L[:, None] - L[None, :])
        dy = np.sign(y[:, None] - y[None, :])
        upper = np.triu(np.ones_like(dl, dtype=bool), 1)
        prod = (dl * dy)[upper]
        concordant += int((prod > 0).sum())
        discordant += int((prod < 0).sum())
    total = concordant + discordant
    return concordant / total if total else float("nan")


def top_k_score(workload, measured, predicted, k: int, weight=None) -> float:
    """sum_t w_t L*_t / sum_t w_t min_{i in P_k(t)} L_ti, P_k = the k lowest predictions."""
    num = den = 0.0
    for L, y, w in _groups(workload, measured, predicted, weight):
        chosen = np.argsort(y, kind="stable")[:k]
        num += w * L.min()
        den += w * L[chosen].min()
    return float(num / den)


def apeak_at_k(workload, measured, predicted, k: int = APEAK_K) -> float:
    """Mean over workloads of (1/k) sum_{j<=k} max_{i<=j} y_pi(i) / max_i y_i.

    Here y = L* / L (1 for the fastest candidate) and pi is the predicted order; a workload
    with fewer than k candidates uses all of them.
    """
    scores = []
    for L, y, _ in _groups(workload, measured, predicted):
        speed = L.min() / L
        order = np.argsort(y, kind="stable")[:k]
        running = np.maximum.accumulate(speed[order])
        scores.append(float(running.mean() / speed.max()))
    return float(np.mean(scores))


def all_metrics(workload, measured, predicted, weight=None) -> dict[str, float]:
    """Every metric of the report, named as in the report."""
    out = {
        "ape": ape(workload, measured, predicted),
        "mape": mape(measured, predicted),
        "kendall_tau": kendall_tau(workload, measured, predicted),
        "opa": opa(workload, measured, predicted),
        f"apeak{APEAK_K}": apeak_at_k(workload, measured, predicted),
    }
    for k in TOP_K:
        out[f"top{k}_score"] = top_k_score(workload, measured, predicted, k, weight)
    return out
