"""Tuners side by side: the same workloads, budget and seeds, on the same machine in one run.

Each (workload, tuner, seed) tunes into its own database folder under `out/runs/`; a finished
one is read back instead of tuned again, so an interrupted comparison resumes where it stopped.
The summary gives, per workload and as a geometric mean over workloads, the best latency at each
budget and the trials each tuner needs to reach what the reference tuner reaches with the full
budget; `curves.png` plots the best latency against trials.
"""

from __future__ import annotations

import json
import math
import os
import shutil

import numpy as np

from tuning.tuner import best_so_far, read_curve, tune_workload

REFERENCE = "ms-default"


def run_dir(out: str, workload_key: str, tuner: str, seed: int) -> str:
    return os.path.join(out, "runs", workload_key.replace("/", "__"), tuner, f"seed{seed}")


def run_curves(workloads, tuners: list[str], trials: int, seeds: list[int], out: str, target,
               measurer, predictor, trials_per_iter: int, progress: bool = True) -> dict:
    """{workload key: {tuner: [latencies per trial, one list per seed]}}; also results.json."""
    results: dict = {w.key: {t: [] for t in tuners} for w in workloads}
    for seed in seeds:  # seed outermost: an interrupted benchmark leaves whole seeds behind
        for w in workloads:
            for tuner in tuners:
                wd = run_dir(out, w.key, tuner, seed)
                curve = _finished(wd, trials)
                if curve is None:
                    shutil.rmtree(wd, ignore_errors=True)
                    tune_workload(w.mod, target, tuner, trials, wd, measurer, predictor, seed,
                                  trials_per_iter, progress=progress,
                                  desc=f"{w.key} {tuner} s{seed}")
                    curve = _finished(wd, 0) or []
                    with open(os.path.join(wd, "done"), "w") as f:
                        f.write(f"{len(curve)}\n")
                results[w.key][tuner].append(curve)
    tmp = os.path.join(out, "results.json.tmp")
    with open(tmp, "w") as f:
        json.dump({"trials": trials, "seeds": seeds, "curves": results}, f)
    os.replace(tmp, os.path.join(out, "results.json"))
    return results


def _finished(work_dir: str, trials: int) -> list[float] | None:
    """The run's latencies if it finished (its design space may hold fewer than `trials`)."""
    if trials and not os.path.exists(os.path.join(work_dir, "done")):
        return None
    curves = read_curve(work_dir)
    return next(iter(curves.values()), [])


def _best_at(curve: list[float], budget: int) -> float:
    best = best_so_far(curve[:budget])
    return float(best[-1]) if len(best) else math.inf


def _trials_to_reach(curve: list[float], level: float) -> float:
    hits = np.flatnonzero(best_so_far(curve) <= level * (1 + 1e-9))
    return float(hits[0] + 1) if len(hits) else math.inf


def summarize(results: dict, budgets: list[int], trials: int) -> dict:
    """Best latency per budget and trials to reach the reference's best, per workload.

    Per workload and tuner: the median over seeds. Over workloads: the geometric mean of the
    best latencies and the median of the trials to reach. `to_reach` compares each seed with the
    reference's run of the same seed (inf: never reached within the budget).
    """
    summary: dict = {"budgets": budgets, "workloads": {}, "geomean": {}}
    for key, by_tuner in results.items():
        ref = by_tuner.get(REFERENCE)
        rows = {}
        for tuner, curves in by_tuner.items():
            row = {f"best@{b}": float(np.median([_best_at(c, b) for c in curves]))
                   for b in budgets}
            if ref:
                row["to_reach"] = float(np.median([
                    _trials_to_reach(c, _best_at(r, trials)) for c, r in zip(curves, ref)]))
            rows[tuner] = row
        summary["workloads"][key] = rows
    tuners = sorted({t for rows in summary["workloads"].values() for t in rows})
    for tuner in tuners:
        rows = [r[tuner] for r in summary["workloads"].values() if tuner in r]
        geo = {}
        for b in budgets:
            vals = [r[f"best@{b}"] for r in rows]
            geo[f"best@{b}"] = float(np.exp(np.mean(np.log(vals)))) \
                if all(math.isfinite(v) for v in vals) else math.inf
        reach = [r["to_reach"] for r in rows if "to_reach" in r]
        if reach:  # the median over workloads: a workload never reached counts as the worst
            geo["to_reach"] = float(np.median(reach))
            geo["reached"] = f"{sum(math.isfinite(v) for v in reach)}/{len(reach)}"
        summary["geomean"][tuner] = geo
    return summary


def format_summary(summary: dict) -> str:
    """Plain-text tables: per workload, then the geometric mean."""
    budgets = summary["budgets"]
    head = f"{'tuner':<11}" + "".join(f"{f'best@{b} (us)':>15}" for b in budgets) + \
        f"{'trials to reach ' + REFERENCE + '@max':>32}"
    lines = []

    def fmt_row(tuner, row):
        cells = "".join(f"{row[f'best@{b}'] * 1e6:>15.1f}" for b in budgets)
        reach = row.get("to_reach")
        text = "" if reach is None else ("never" if not math.isfinite(reach) else f"{reach:.0f}")
        if "reached" in row:
            text += f" (reached {row['reached']})"
        return f"{tuner:<11}{cells}{text:>32}"

    for key, rows in summary["workloads"].items():
        lines += [key, head] + [fmt_row(t, r) for t, r in rows.items()] + [""]
    lines += ["geometric mean over workloads (trials to reach: median over workloads)", head]
    lines += [fmt_row(t, r) for t, r in summary["geomean"].items()]
    ref = summary["geomean"].get(REFERENCE)
    if ref:
        last = f"best@{budgets[-1]}"
        for tuner, row in summary["geomean"].items():
            if tuner != REFERENCE and math.isfinite(row[last]) and math.isfinite(ref[last]):
                change = 100 * (1 - row[last] / ref[last])
                lines.append(f"{tuner}: {abs(change):.1f}% {'lower' if change >= 0 else 'higher'}"
                             f" latency than {REFERENCE} at {budgets[-1]} trials (geomean)")
    return "\n".join(lines)


def plot_curves(results: dict, path: str) -> None:
    """Best latency against trials, median over seeds, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    n = len(results)
    cols = min(n, 3)
    rows = int(math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, (key, by_tuner) in zip(axes.flat, results.items()):
        for tuner, curves in by_tuner.items():
            length = min(len(c) for c in curves)
            if not length:
                continue
            best = np.median([best_so_far(c[:length]) for c in curves], axis=0) * 1e6
            ax.plot(np.arange(1, length + 1), best, label=tuner)
        ax.set(title=key, xlabel="measured trials", ylabel="best latency (us)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
