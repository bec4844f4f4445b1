"""`costmodel evaluate`: score checkpoints and MetaSchedule's XGBoost baseline on a held-out split.

Writes `report.json` (every metric, overall and per family, per checkpoint, with the mean and
spread over checkpoints trained with different seeds), a readable `report.md`, and plots:
predicted against measured latency, and per-workload Kendall tau of each model.
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from datagen.errors import UserError
from datagen.records import read_records
from datagen.tvm_env import make_target
from training.data import RECORD_COLUMNS, split_workloads, usable
from training.metrics import all_metrics, kendall_tau

GRAPHSAGE, XGB = "graphsage", "xgb"
# XGBModel predicts throughput relative to each workload's best, not latency: no MAPE
NOT_LATENCY = ("mape",)


def _metrics(frame: pd.DataFrame, predicted: np.ndarray, latency: bool) -> dict:
    """Metrics overall and per family; `predicted` is a latency (lower is faster)."""
    def score(part, pred):
        m = all_metrics(part.workload_key, part.latency_median, pred, part.workload_weight)
        return {k: (v if latency or k not in NOT_LATENCY else None) for k, v in m.items()}

    out = {"overall": score(frame, predicted), "per_family": {}}
    for fam, part in frame.groupby("family"):
        out["per_family"][fam] = score(part, predicted[frame.family.to_numpy() == fam])
    return out


def _spread(runs: list[dict]) -> tuple[dict, dict]:
    keys = runs[0]["overall"].keys()
    vals = {k: [r["overall"][k] for r in runs if r["overall"][k] is not None] for k in keys}
    mean = {k: float(np.mean(v)) if v else None for k, v in vals.items()}
    std = {k: float(np.std(v)) if v else None for k, v in vals.items()}
    return mean, std


def _plots(test: pd.DataFrame, preds: dict[str, np.ndarray], out: str) -> list[str]:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    files = []
    fig, ax = plt.subplots(figsize=(5.5, 5))
    measured = test.latency_median.to_numpy() * 1e6
    pred = preds[GRAPHSAGE] * 1e6
    ax.scatter(measured, pred, s=4, alpha=0.4)
    lo, hi = min(measured.min(), pred.min()), max(measured.max(), pred.max())
    ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured latency (us)",
           ylabel="predicted latency (us)", title="GraphSAGE on held-out workloads")
    fig.tight_layout()
    files.append(os.path.join(out, "predicted_vs_measured.png"))
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)

    taus = pd.DataFrame({name: [kendall_tau(g.workload_key, g.latency_median, p[g.index])
                                for _, g in test.groupby("workload_key")]
                         for name, p in preds.items()},
                        index=sorted(test.workload_key.unique()))
    fig, ax = plt.subplots(figsize=(8, 0.25 * len(taus) + 1.5))
    taus.plot.barh(ax=ax)
    ax.set(xlabel="Kendall tau (per workload)", xlim=(-1, 1))
    ax.tick_params(axis="y", labelsize=7)
    fig.tight_layout()
    files.append(os.path.join(out, "kendall_tau_per_workload.png"))
    fig.savefig(files[-1], dpi=120)
    plt.close(fig)
    return files


def _markdown(report: dict) -> str:
    names = list(report["models"])
    metrics = list(report["models"][names[0]]["mean"])
    lines = [f"# Cost-model evaluation: {report['split']} split",
             "", f"Dataset `{report['dataset']}`; {report['test_workloads']} held-out workloads "
             f"({', '.join(report['test_families'])}), "
             f"{report['test_records']} records; trained on {report['train_workloads']} "
             "workloads.", "", "| model | " + " | ".join(metrics) + " |",
             "|---" * (len(metrics) + 1) + "|"]
    for name in names:
        m, s = report["models"][name]["mean"], report["models"][name]["std"]
        cells = ["n/a" if m[k] is None else f"{m[k]:.3f} ± {s[k]:.3f}" for k in metrics]
        lines.append(f"| {name} ({report['models'][name]['runs']} run(s)) | "
                     + " | ".join(cells) + " |")
    lines += ["", "## Per family (first run of each model)", ""]
    for name in names:
        fams = report["models"][name]["per_run"][0]["per_family"]
        lines += [f"### {name}", "", "| family | " + " | ".join(metrics) + " |",
                  "|---" * (len(metrics) + 1) + "|"]
        for fam, m in fams.items():
            lines.append(f"| {fam} | " + " | ".join("n/a" if m[k] is None else f"{m[k]:.3f}"
                                                    for k in metrics) + " |")
        lines.append("")
    lines += [f"![{os.path.splitext(p)[0].replace('_', ' ')}]({p})" for p in report["plots"]]
    return "\n".join(lines) + "\n"


def choose_sides(meta: dict, frame: pd.DataFrame, split: str | None, test_fraction: float,
                 test_families: list[str] | None, test_networks: list[str] | None,
                 seed: int) -> tuple[str, dict]:
    """(split, sides) to evaluate on: the checkpoint's own, unless another split is asked for.

    Naming test families (networks) without a split means the family (network) split.
    """
    if split is None:
        split = "family" if test_families else "network" if test_networks else None
    if split is None or (split == meta["split"] and not test_families and not test_networks):
        return meta["split"], meta["sides"]
    return split, split_workloads(frame, split, test_fraction, test_families or [], 0.0, seed,
                                  test_networks)


def evaluate(checkpoints: list[str], dataset: str, out: str, split: str | None = None,
             test_fraction: float = 0.2, test_families: list[str] | None = None,
             seed: int = 0, baseline: bool = True, test_networks: list[str] | None = None,
             ensemble: bool = False) -> dict:
    """Evaluate checkpoints (one per training seed, or all of them as one ensemble) and the
    XGB baseline; write the report."""
    from costmodel.predictor import CostModelPredictor
    from training.baselines import fit_xgb, predict_xgb

    predictors = [CostModelPredictor.load(checkpoints)] if ensemble else \
        [CostModelPredictor.load(c) for c in checkpoints]
    frame, dropped = usable(read_records(dataset, RECORD_COLUMNS))
    if frame.empty:
        raise UserError(f"{dataset} has no successfully measured records")
    meta = predictors[0].meta
    split, sides = choose_sides(meta, frame, split, test_fraction, test_families, test_networks,
                                seed)
    test = frame[frame.workload_key.isin(sides["test"])].reset_index(drop=True)
    train = frame[frame.workload_key.isin(sides["train"])].reset_index(drop=True)
    if test.empty or train.empty:
        raise UserError(f"the {split} split leaves {'test' if test.empty else 'train'} empty "
                        f"in {dataset}")
    os.makedirs(out, exist_ok=True)
    models, preds = {}, {}
    runs = []
    for p in predictors:
        pred = p.predict_records(test)
        preds.setdefault(GRAPHSAGE, pred)
        runs.append(_metrics(test, pred, latency=True))
    mean, std = _spread(runs)
    models[GRAPHSAGE] = {"runs": len(runs), "ensemble": ensemble, "mean": mean, "std": std,
                         "per_run": runs,
                         "checkpoints": [os.path.basename(c) for c in checkpoints]}
    if baseline:
        target = make_target(json.loads(meta["target"]))
        runs = []
        for s in range(len(predictors)):
            scores = predict_xgb(fit_xgb(train, target, seed=s), test, target).to_numpy()
            preds.setdefault(XGB, -scores)
            runs.append(_metrics(test, -scores, latency=False))
        mean, std = _spread(runs)
        models[XGB] = {"runs": len(runs), "mean": mean, "std": std, "per_run": runs}
    test_fams = sorted(test.family.unique())
    report = {"split": split, "dataset": dataset, "dropped_records": dropped,
              "test_families": test_fams,
              "train_workloads": len(sides["train"]), "test_workloads": len(sides["test"]),
              "test_records": len(test), "models": models}
    report["plots"] = [os.path.basename(f) for f in _plots(test, preds, out)]
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(_markdown(report))
    return report
