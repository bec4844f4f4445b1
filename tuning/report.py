"""The figures of a comparison.

The summary gives, per workload and as a geometric mean over workloads, the best in-run latency
at each budget, the trials to reach the reference's final latency and each tuner's wall time
per trial (searching, building and measuring; where the runs recorded it), and, per pair of tuners
(ours against each baseline), paired statistics over the (workload, seed) pairs: the
re-measured latency ratio per pair, wins, ties (within 2%) and losses, the geometric-mean ratio
with a paired bootstrap 95% interval, and the trials to reach the baseline's final latency.
`curves.png` plots the best latency against trials.
"""

from __future__ import annotations

import math

import numpy as np

from tuning.tuner import best_so_far

REFERENCE = "ms-default"
# the tuners whose ratios to every other tuner are reported (bo-mix: so that the search x model
# ablation pairs each model's two searches, bo-mix against ms-mix)
OURS = ("bo", "bo-mix", "bo-learn", "ms-ours")
TIE = 0.02  # a ratio within 2% of 1 is a tie
BOOTSTRAP_SAMPLES = 10000


def _best_at(curve: list[float], budget: int) -> float:
    best = best_so_far(curve[:budget])
    return float(best[-1]) if len(best) else math.inf


def _trials_to_reach(curve: list[float], level: float) -> float:
    hits = np.flatnonzero(best_so_far(curve) <= level * (1 + 1e-9))
    return float(hits[0] + 1) if len(hits) else math.inf


def _median(values) -> float:
    return float(np.median(values)) if len(values) else math.inf


def geomean(values) -> float:
    """The geometric mean; inf when `values` is empty or holds a non-finite value."""
    values = np.asarray(values, float)
    return float(np.exp(np.mean(np.log(values)))) if len(values) and \
        np.all(np.isfinite(values)) else math.inf


def summarize(results: dict, remeasured: dict, budgets: list[int], trials: int,
              tuner_trials: dict[str, int] | None = None, walls: dict | None = None) -> dict:
    """In-run best latency per budget, re-measured finalists, trials to reach the reference's
    best, wall time per trial (from `walls`, `tuning.compare.RESULTS_FILE`'s "wall_s"), per
    workload and over workloads, and the paired statistics of `paired_stats`.

    Per workload and tuner: the median over seeds. Over workloads: the geometric mean of the
    latencies and the median of the trials to reach and of the wall time per trial.
    `to_reach` compares each seed with the reference's run of the same seed (inf: never
    reached within the budget). A tuner given a smaller budget in `tuner_trials` has no
    figures at the budgets beyond it.
    """
    summary: dict = {"budgets": budgets, "workloads": {}, "geomean": {}}
    for key, by_tuner in results.items():
        ref = by_tuner.get(REFERENCE)
        rows = {}
        for tuner, curves in by_tuner.items():
            runs_to = (tuner_trials or {}).get(tuner, trials)
            row = {f"best@{b}": _median([_best_at(c, b) for c in curves]) for b in budgets
                   if b <= runs_to}
            for b, finals in remeasured.get(key, {}).items():
                if tuner in finals:
                    row[f"remeasured@{b}"] = _median([_median(f) for f in finals[tuner]])
            if ref:
                row["to_reach"] = _median([
                    _trials_to_reach(c, _best_at(r, trials)) for c, r in zip(curves, ref)])
            per_trial = [w / len(c) for w, c in zip(((walls or {}).get(key) or {}).get(tuner, []),
                                                     curves) if w is not None and len(c)]
            if per_trial:
                row["s_per_trial"] = _median(per_trial)
            rows[tuner] = row
        summary["workloads"][key] = rows
    tuners = list(dict.fromkeys(t for rows in summary["workloads"].values() for t in rows))
    for tuner in tuners:
        rows = [r[tuner] for r in summary["workloads"].values() if tuner in r]
        geo = {k: geomean([r[k] for r in rows]) for k in rows[0]
               if k.startswith(("best@", "remeasured@"))}
        reach = [r["to_reach"] for r in rows if "to_reach" in r]
        if reach:  # the median over workloads: a workload never reached counts as the worst
            geo["to_reach"] = _median(reach)
            geo["reached"] = f"{sum(math.isfinite(v) for v in reach)}/{len(reach)}"
        per_trial = [r["s_per_trial"] for r in rows if "s_per_trial" in r]
        if per_trial:
            geo["s_per_trial"] = _median(per_trial)
        summary["geomean"][tuner] = geo
    summary["paired"] = paired_stats(results, remeasured, trials)
    return summary


def paired_stats(results: dict, remeasured: dict, trials: int, seed: int = 0) -> list[dict]:
    """Ours (`OURS`) against every other tuner, over the (workload, seed) pairs, on re-measured
    finalists: at equal budgets, and ours at the smallest against theirs at the largest.

    Per pair: the median of the per-round ratios of the re-measured latencies (rounds are
    interleaved, so each round's pair shares the machine's state; below 1: ours is faster),
    their spread (25th to 75th percentile), and the
    trials ours needs in-run to reach the baseline's in-run latency at its budget. Over pairs:
    wins, ties (within `TIE`) and losses, the geometric-mean ratio with a paired bootstrap 95%
    interval (pairs resampled), and the median trials to reach.
    """
    rng = np.random.default_rng(seed)
    keys = [k for k in results if k in remeasured and remeasured[k]]
    if not keys:
        return []
    budgets = sorted(int(b) for b in remeasured[keys[0]])
    combos = [(b, b) for b in budgets] + ([(budgets[0], budgets[-1])] if len(budgets) > 1 else [])
    tuners = list(results[keys[0]])
    out = []
    for ours in [t for t in OURS if t in tuners]:
        for base in [t for t in tuners if t != ours]:
            for b_ours, b_base in combos:
                if any(ours not in remeasured[k][b_ours] or base not in remeasured[k][b_base]
                       for k in keys):
                    continue  # one of them did not run that far
                pairs = []
                for key in keys:
                    mine = remeasured[key][b_ours][ours]
                    theirs = remeasured[key][b_base][base]
                    for s, (a, b) in enumerate(zip(mine, theirs)):
                        per_round = np.asarray(a[:len(b)], float) / np.asarray(b[:len(a)], float)
                        level = _best_at(results[key][base][s], b_base)
                        pairs.append({
                            "workload": key, "seed_index": s,
                            "ratio": _median(per_round),
                            "spread": [float(np.percentile(per_round, 25)),
                                       float(np.percentile(per_round, 75))],
                            "to_reach": _trials_to_reach(results[key][ours][s][:b_ours], level)})
                out.append(_pair_summary(ours, b_ours, base, b_base, pairs, rng))
    return out


def _pair_summary(ours: str, b_ours: int, base: str, b_base: int, pairs: list[dict],
                  rng) -> dict:
    ratios = np.array([p["ratio"] for p in pairs], float)
    finite = np.isfinite(ratios) & (ratios > 0)
    row = {"ours": ours, "ours_budget": b_ours, "baseline": base, "baseline_budget": b_base,
           "pairs": pairs, "n": len(pairs),
           "wins": int(np.sum(ratios < 1 - TIE)), "ties": int(np.sum(np.abs(ratios - 1) <= TIE)),
           "losses": int(np.sum(ratios > 1 + TIE)),
           "geomean_ratio": geomean(ratios), "ci95": [math.inf, math.inf]}
    if finite.all() and len(ratios):
        logs = np.log(ratios)
        idx = rng.integers(0, len(logs), (BOOTSTRAP_SAMPLES, len(logs)))
        boot = np.exp(logs[idx].mean(axis=1))
        row["ci95"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    reach = [p["to_reach"] for p in pairs]
    row["to_reach_median"] = _median(reach)
    row["reached"] = f"{sum(math.isfinite(v) for v in reach)}/{len(reach)}"
    return row


def _fmt_trials(v: float) -> str:
    return "never" if not math.isfinite(v) else f"{v:.0f}"


def format_summary(summary: dict, descriptions: dict[str, str] | None = None) -> str:
    """Plain-text tables (per workload, then the geometric mean) and the paired statistics;
    with `descriptions`, first a line on what each tuner is."""
    budgets = summary["budgets"]
    remeasured = sorted({k for row in summary["geomean"].values() for k in row
                         if k.startswith("remeasured@")}, key=lambda k: int(k.split("@")[1]))
    head = f"{'tuner':<18}" + "".join(f"{f'best@{b} (us)':>15}" for b in budgets) + \
        "".join(f"{k.replace('remeasured', 're-measured') + ' (us)':>22}" for k in remeasured) + \
        f"{'trials to reach ' + REFERENCE + '@max':>32}{'s/trial':>9}"
    lines = []
    if descriptions:
        lines += ["tuners (all in MetaSchedule's loop, same builder, runner and batch size):"]
        lines += [f"  {t:<18}{descriptions[t]}" for t in summary["geomean"] if t in descriptions]
        lines += [""]

    def fmt_row(tuner, row):
        def cell(key, width):  # a tuner given a smaller budget has no figure at a larger one
            return f"{row[key] * 1e6:>{width}.1f}" if key in row else f"{'-':>{width}}"

        cells = "".join(cell(f"best@{b}", 15) for b in budgets)
        cells += "".join(cell(k, 22) for k in remeasured)
        reach = row.get("to_reach")
        text = "" if reach is None else _fmt_trials(reach)
        if "reached" in row:
            text += f" (reached {row['reached']})"
        wall = f"{row['s_per_trial']:.2f}" if "s_per_trial" in row else "-"
        return f"{tuner:<18}{cells}{text:>32}{wall:>9}"

    for key, rows in summary["workloads"].items():
        lines += [key, head] + [fmt_row(t, r) for t, r in rows.items()] + [""]
    lines += ["geometric mean over workloads (trials to reach, s/trial: median over workloads)",
              head]
    lines += [fmt_row(t, r) for t, r in summary["geomean"].items()]
    if summary.get("paired"):
        lines += ["", "paired, on re-measured finalists (ratio < 1: ours faster; wins/ties/losses "
                  f"at ±{TIE:.0%}; 95% interval: paired bootstrap over pairs, or for one pair "
                  "the 25-75th percentile over re-measurement rounds)"]
    for row in summary.get("paired", []):
        if row["n"] == 1:
            spread = row["pairs"][0]["spread"]
            interval = f"rounds {spread[0]:.3f}-{spread[1]:.3f}"
        else:
            interval = f"95% CI {row['ci95'][0]:.3f}-{row['ci95'][1]:.3f}"
        lines.append(
            f"{row['ours']}@{row['ours_budget']} / {row['baseline']}@{row['baseline_budget']}: "
            f"ratio {row['geomean_ratio']:.3f} ({interval}) over {row['n']} pair(s); "
            f"{row['wins']} wins, {row['ties']} ties, {row['losses']} losses; trials to reach its "
            f"in-run latency: median {_fmt_trials(row['to_reach_median'])} "
            f"(reached {row['reached']})")
    return "\n".join(lines)


def plot_curves(results: dict, path: str) -> None:
    """Best latency against trials, median over seeds, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodel.figures import save_figure

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
    save_figure(fig, path, dpi=110)
    plt.close(fig)
