"""Benchmark: few-shot transfer of a trained checkpoint to another dataset (a CPU model to GPU
measurements), as a curve over the share of the target's training records.

For every share (default 1%, 5%, 10% and all of the training side's records) and seed, models
train on the same records of --dataset with `train fit` (configs/graphsage.yaml, the
architecture of --init-from), one per mode (--modes): "scratch", from random weights;
"finetuned", from the weights of --init-from (`--model.init_from`: the source's input
standardisation, target statistics of the share; with --freeze, some of its parts kept as
trained; a source with a head per CPU, cost model v3, starts it from its own target's head);
"joint", from random weights on the share plus --joint-share of each --joint-dataset's
records (by default the dataset --init-from was trained on; several folders, say every
other CPU's dataset, train together), one model learning every target at once (MTL-TLP's
recipe, `--data.joint_dataset`: each target's latencies standardised with its own
statistics); "joint_heads", the same with a head of its
own per other target on the shared layers (`--model.joint_head`, MTL-TLP's multi-task heads);
"finetuned_joint_heads", the same from the weights of --init-from, the other targets' heads
starting as copies of its head
(fine-tuning beside the source's own records, so that it does not forget them);
"self_trained", from random weights on the share plus every other training-side record
labelled by a teacher (`--data.pseudo_labels`): the share and seed's models of the other modes
given, as one ensemble, predict the latencies of the programs the share left unmeasured
(self-training, or distillation onto unlabelled programs: those programs are drawn and lowered
but never run on the target; the teacher learnt from the share only). With
--normalize-per-workload every mode's labels are standardised within each workload (MAPE is
then undefined). The share is a seeded draw within each workload that keeps at least
2 records of each (`--data.train_share`, `--data.share_seed` = the seed); the split (seeded by
--split-seed) is the same for every run, and validation and test keep all their records. Each
run keeps its checkpoint of best validation Kendall tau; it is scored on the held-out side with
`costmodel evaluate`'s metrics (`costmodel.evaluate.score`: Kendall tau, top-1 score, MAPE, and
the others, averaged over workloads). An epoch of a small share is a few steps, so
--max-epochs trains it less than all records; --steps N trains every run N optimiser steps
instead, validated --max-epochs times. With --ensemble K each run is K models trained on the
same share (training seeds S, S + 1000, ...: only the initial weights and the batches
differ), scored as one ensemble (mean predicted log-latency, as `costmodel evaluate
--ensemble`) and each member alone. With --together, each share and seed's models of every
mode (all members) are also scored as one ensemble (say the fine-tuned models beside those
from scratch: both learned from the same share only); it reads the runs' checkpoints and
trains nothing more. With --warp-features every mode's model also reads
each access's warp features (the GPU recipe; a source without them starts the fine-tuned
model with zero weights on them). --init-from itself, untrained on the dataset, is scored
too ("source": its zero-shot ranking; its MAPE says little when its target differs), as it
is (its featuriser lowers the programs for its own target) and as fine-tuning starts from
it ("fine_tuning_start": the programs featurised for the dataset's target, and a feature
constant in its own training data, a GPU thread binding for a CPU model, standardised with
the statistics of the training workloads' programs instead of divided by zero; no latency
is read).

Writes summary.json (every run, and per mode and share the mean and standard deviation over
seeds) and transfer.png (Kendall tau and top-1 against the share, log x, both curves, the
source as a line, and with --reference REPORT the model of a `costmodel evaluate` report
of the same held-out records, say the one trained on all of them). Each run lives in
--out/runs/MODE/shareF-seedS with its config, logs, checkpoint and result.json; finished
runs are read back, so an interrupted benchmark resumes (a run made with other settings, or
on another number of records, the dataset grown since, is refused: use another --out).

    python bench/transfer.py --dataset data/cuda-h100 --init-from bench/models/graphsage.ckpt \\
        --split shapes [--shares 0.01 0.05 0.1 1.0] [--seeds 0 1 2] [--max-epochs 30] \\
        [--steps 1770] [--accelerator gpu]
    python bench/transfer.py --dataset data/cuda-h100 --init-from bench/models/graphsage.ckpt \\
        --split shapes --modes scratch joint --joint-dataset data/llvm-networks \\
        --joint-share 0.25 --shares 0.1 0.5 1.0
    python bench/transfer.py --dataset data/llvm-znver1 --init-from bench/models/graphsage-v2.ckpt \\
        --split novel-shapes --modes scratch joint_heads \\
        --joint-dataset data/llvm-networks data/llvm-full --shares 1.0 --seeds 0
    python bench/transfer.py --dataset data/llvm-full \\
        --init-from bench/models/graphsage-family-depthwise.ckpt --split family \\
        --test-families depthwise_conv2d --shares 0.05 1.0 --seeds 0 --max-epochs 2
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import shutil
import sys

import numpy as np
import pandas as pd

from datagen.grid import Grid, portable, write_json

MODES = ("scratch", "finetuned", "joint", "joint_heads", "finetuned_joint_heads", "self_trained")
SELF_TRAINED = "self_trained"  # the student of the other modes' models: trained last
# the modes that train beside --joint-dataset, and those that start from --init-from's weights
JOINT_MODES = ("joint", "joint_heads", "finetuned_joint_heads")
FINETUNED_MODES = ("finetuned", "finetuned_joint_heads")
METRICS = ("kendall_tau", "top1_score", "mape")  # printed and summarised first
PLOTTED = {"kendall_tau": "Kendall tau", "top1_score": "top-1 score"}
TOGETHER = "together"  # --together's curve: every mode's models of a share and seed as one
# `costmodel.splits.SPLITS` that hold out workloads of the one dataset
TRANSFER_SPLITS = ("shapes", "family", "network", "novel-shapes", "unseen-family")
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "graphsage.yaml")


ENSEMBLE_SEED_STEP = 1000  # member m of an ensemble trains with seed S + m * this


def run_config(args, architecture: dict, mode: str, share: float, seed: int,
               work: str, train_seed: int | None = None, teacher: str | None = None) -> dict:
    """The settings `train fit` reads after the base config (--config) for one run: `seed`
    draws the share, `train_seed` (default: `seed`) seeds the training; `teacher`: the
    self-trained mode's pseudo-labels."""
    from costmodel import views
    from training.cli import run_trainer

    model = {"architecture": architecture["name"], "hidden": architecture["hidden"],
             "num_layers": architecture["num_layers"], "dropout": architecture["dropout"],
             "use_program_features": bool(architecture["num_program_features"]),
             "readout": architecture.get("readout", "mean_max"),
             "views": [view.name for view in views.optional() if view.reads(architecture)
                       or (view is views.WARP and args.warp_features)]}
    if mode in FINETUNED_MODES:
        model["init_from"] = args.init_from
        if args.finetune_lr is not None:
            model["lr"] = args.finetune_lr
        if args.freeze:
            model["freeze"] = args.freeze
    data = {"dataset": args.dataset, "split": args.split,
            "test_fraction": args.test_fraction, "test_families": args.test_families,
            "test_networks": args.test_networks, "val_fraction": args.val_fraction,
            "seed": args.split_seed, "train_share": share, "share_seed": seed,
            "cache_dir": args.cache_dir,
            "normalize_per_workload": args.normalize_per_workload}
    if mode in JOINT_MODES:
        folders = args.joint_dataset
        data.update(joint_dataset=folders[0] if len(folders) == 1 else folders,
                    joint_share=args.joint_share)
    if mode.endswith("joint_heads"):
        model["joint_head"] = True
    if mode == SELF_TRAINED:
        data["pseudo_labels"] = teacher
    return {"seed_everything": seed if train_seed is None else train_seed,
            "trainer": run_trainer(work, args.accelerator, args.max_epochs, args.steps),
            "model": model, "data": data}


# settings a run records since a later version: one made before is read back without them
ADDED_SETTINGS = ("records",)


def settings(args, records: int) -> dict:
    """What a finished run must share with this invocation to be read back: also the number of
    the dataset's usable records, so a run made before the dataset grew is not read back."""
    wanted = {"dataset": portable(args.dataset, REPO), "records": records,
              "init_from": portable(args.init_from, REPO), "split": args.split,
              "test_fraction": args.test_fraction, "test_families": args.test_families,
              "test_networks": args.test_networks,
              "val_fraction": args.val_fraction, "split_seed": args.split_seed,
              "max_epochs": args.max_epochs, "finetune_lr": args.finetune_lr,
              "config": portable(args.config, REPO)}
    # only when set, so results made before these options read back
    if args.normalize_per_workload:
        wanted["normalize_per_workload"] = True
    if args.warp_features:
        wanted["warp_features"] = True
    if args.steps:
        wanted["steps"] = args.steps
    if args.freeze:
        wanted["freeze"] = args.freeze
    if args.ensemble > 1:
        wanted["ensemble"] = args.ensemble
    if set(JOINT_MODES) & set(args.modes):
        folders = [portable(f, REPO) for f in args.joint_dataset]
        wanted.update(joint_dataset=folders[0] if len(folders) == 1 else folders,
                      joint_share=args.joint_share)
    return wanted


def run_settings(wanted: dict, mode: str, teachers: list[str]) -> dict:
    """What one mode's finished run must share with this invocation (`settings`; the
    self-trained mode's also its teachers' modes)."""
    return {**wanted, "teacher": teachers} if mode == SELF_TRAINED else wanted


def run_cell(share: float, seed: int, mode: str) -> str:
    """One run's result in --out (a cell of the benchmark's `Grid`), in the run's folder."""
    return os.path.join("runs", mode, f"share{share:g}-seed{seed}", "result.json")


def train(args, architecture: dict, mode: str, share: float, seed: int, work: str,
          train_seed: int | None = None, teacher: str | None = None) -> str:
    """Run `train fit` for one (mode, share, seed) in `work` (the training seeded by
    `train_seed`, default `seed`; `teacher`: see `run_config`); its best checkpoint."""
    from datagen.errors import UserError

    shutil.rmtree(work, ignore_errors=True)  # a run that did not finish starts over
    os.makedirs(work)
    config = os.path.join(work, "run-config.json")
    with open(config, "w") as f:
        json.dump(run_config(args, architecture, mode, share, seed, work, train_seed, teacher),
                  f, indent=1)
    from training.cli import train_process

    proc = train_process(["fit", "--config", args.config, "--config", config])
    with open(os.path.join(work, "train.log"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"training {mode} share {share:g} seed {seed} failed: {last} "
                        f"(log: {work}/train.log)")
    found = glob.glob(os.path.join(work, "checkpoints", "*.ckpt"))
    if len(found) != 1:
        raise UserError(f"training {mode} share {share:g} seed {seed} left {len(found)} "
                        f"checkpoints in {work}/checkpoints, expected 1")
    return found[0]


def joint_records(meta: dict) -> int | None:
    """How many records of other datasets trained beside a checkpoint's own (None: none)."""
    from costmodel.splits import joint_entries

    joint = joint_entries(meta)
    return sum(j["records"] for j in joint) if joint else None


class HeldOut:
    """The held-out records every run is scored on, and scoring with the evaluator's metrics."""

    def __init__(self, args):
        from datagen.records import read_records
        from costmodel.splits import RECORD_COLUMNS, check_one_target, usable

        self.frame, _ = usable(read_records(args.dataset, RECORD_COLUMNS))
        check_one_target(self.frame, args.dataset)
        self.keys: list[str] | None = None
        self.device = "cuda" if args.accelerator == "gpu" else "cpu"
        self.cache_dir = args.cache_dir

    def records(self, keys: list[str]):
        """The test records of a run's checkpoint; every run must hold out the same ones."""
        from datagen.errors import UserError

        if self.keys is None:
            self.keys = sorted(keys)
        elif sorted(keys) != self.keys:
            raise UserError("runs hold out different workloads: the split is not the same")
        return self.frame[self.frame.workload_key.isin(self.keys)].reset_index(drop=True)

    def score(self, checkpoint: str | list[str], keys: list[str],
              count_ranked: bool = False) -> dict:
        """The overall metrics of `checkpoint` (several: as one ensemble) on the test records
        `keys`; with `count_ranked`, also `ranked_workloads`: on how many of the workloads its
        predictions differ at all (Kendall tau skips the others: a model that scores most
        programs alike has its tau from the few it ranks)."""
        from costmodel.predictor import CostModelPredictor

        predictor = CostModelPredictor.load(checkpoint, cache_dir=self.cache_dir,
                                            device=self.device)
        return self.metrics(predictor, keys, count_ranked)

    def score_as_fine_tuning_starts(self, source: str, train_keys: list[str],
                                    keys: list[str]) -> dict:
        """`score` of `source` untrained on this dataset, as fine-tuning starts from it: the
        programs featurised for this dataset's target (not lowered for the source's), their
        inputs standardised as fine-tuning standardises them (`Normalization.with_inputs_of`):
        a feature that was constant in the source's training data (thread bindings, shared
        memory in CPU programs) takes the statistics of the programs of the training
        workloads `train_keys` here (their features only: no latency is read). With its own
        statistics such a feature is divided by EPS and every prediction clips to the same
        value; this says whether the source ranks the target's programs before any
        training."""
        import dataclasses

        from costmodel import featurize
        from costmodel.normalization import Normalization
        from costmodel.predictor import CostModelPredictor

        predictor = CostModelPredictor.load(source, cache_dir=self.cache_dir,
                                            device=self.device, blend=False)
        views = predictor.featurizer  # the views it reads, featurised for this target
        predictor.featurizer = featurize.Featurizer(
            json.loads(self.frame.target.iloc[0]), cache_dir=self.cache_dir,
            stores=views.stores, traces=views.traces, warps=views.warps)
        theirs = predictor.members[0].normalization  # one for every member of an ensemble
        frame = self.frame[self.frame.workload_key.isin(train_keys)]
        graphs = [g for g in predictor.featurizer.iter_records(
            zip(frame.workload_ir, frame.trace, frame.trace_hash))
            if not isinstance(g, featurize.FeaturizeError)]
        ours = Normalization.fit(graphs, np.ones(len(graphs)), per_flop=theirs.per_flop)
        for member in predictor.members:  # the source's targets: it is not trained
            member.normalization = dataclasses.replace(
                ours.with_inputs_of(theirs), y_mean=theirs.y_mean, y_std=theirs.y_std,
                per_workload=theirs.per_workload)
        return self.metrics(predictor, keys, count_ranked=True)

    def metrics(self, predictor, keys: list[str], count_ranked: bool = False) -> dict:
        """`score`'s metrics of a loaded `CostModelPredictor`."""
        from costmodel.evaluate import score

        records = self.records(keys)
        pred = predictor.predict_records(records)
        metrics = score(predictor, records, pred)["overall"]
        if count_ranked:
            ranges = pd.Series(pred).groupby(records.workload_key.to_numpy()).agg(np.ptp)
            metrics["ranked_workloads"] = int((ranges > 0).sum())
        return metrics


def check_no_leak(source_meta: dict, target: str, test_keys: list[str]) -> None:
    """Refuse a source checkpoint that trained on the held-out workloads of the same target.

    Raises:
        UserError: it did (fine-tuning would be scored on programs it learnt).
    """
    from datagen.errors import UserError

    if source_meta["target"] != target:
        return  # another target's latencies: the same workloads measured elsewhere
    seen = sorted(set(test_keys) & (set(source_meta["sides"]["train"])
                                    | set(source_meta["sides"]["val"])))
    if seen:
        raise UserError(f"--init-from trained on {len(seen)} of the held-out workloads on this "
                        f"target (e.g. {seen[0]}); choose the split it was trained with")


def read_reference(path: str, dataset: str, test_records: int) -> dict:
    """The `graphsage` model's mean metrics in a `costmodel evaluate` report (report.json) of
    the same held-out records: the model trained on all of them, a line on the plot.

    Raises:
        UserError: no such report, or one of other held-out records.
    """
    from datagen.errors import UserError

    try:
        with open(path) as f:
            report = json.load(f)
        model, name = report["models"]["graphsage"], report["dataset"]
        held_out = report["test_records"]
        metrics = {m: float(model["mean"][m]) for m in PLOTTED}
    except (OSError, ValueError, KeyError, TypeError) as e:
        raise UserError(f"--reference {path} is no `costmodel evaluate` report.json "
                        f"({type(e).__name__}: {e})") from None
    if portable(name, REPO) != portable(dataset, REPO) or held_out != test_records:
        raise UserError(f"--reference {path} scored {held_out} held-out records of {name}, "
                        f"these runs {test_records} of {dataset}: give a report of the same "
                        "split")
    return {"report": portable(path, REPO), "runs": model.get("runs"), "metrics": metrics}


def spread(scores: list[dict]) -> dict:
    """Each metric's mean and standard deviation over the `scores` where it is defined (`n` of
    them; None if none: MAPE of a relative model, or Kendall tau of a model that predicts
    every held-out program alike)."""
    import math

    out = {}
    for metric in scores[0]:
        vals = [s[metric] for s in scores if s[metric] is not None and math.isfinite(s[metric])]
        out[metric] = ({"mean": float(np.mean(vals)), "std": float(np.std(vals)),
                        "n": len(vals)} if vals else None)
    return out


def summarize(runs: list[dict], shares: list[float]) -> dict:
    """Per mode and share: each metric's mean and standard deviation over the seeds
    (`spread`), and with --ensemble over all members alone (`members`)."""
    curves = {}
    for mode in MODES:
        for share in shares:
            mine = [r for r in runs if r["mode"] == mode and r["share"] == share]
            if not mine:
                continue
            row = {"seeds": [r["seed"] for r in mine],
                   "train_records": float(np.mean([r["train_records"] for r in mine]))}
            row.update(spread([r["metrics"] for r in mine]))
            if all("members" in r for r in mine):  # --ensemble: its members one by one
                row["members"] = spread([m for r in mine for m in r["members"]])
            curves.setdefault(mode, {})[f"{share:g}"] = row
    return curves


def together(args, runs: list[dict], side: HeldOut) -> dict:
    """--together: per share and seed, the checkpoints of every mode's run scored as one
    ensemble; the runs (`runs`) and per share their spread over seeds (`curves`)."""
    from datagen.errors import UserError

    rows = []
    for share in args.shares:
        for seed in args.seeds:
            mine = [r for r in runs if r["share"] == share and r["seed"] == seed]
            ckpts = [c for r in mine for c in run_checkpoints(args, r)]
            gone = [c for c in ckpts if not os.path.exists(c)]
            if gone:
                raise UserError(f"--together scores the runs' checkpoints, and {gone[0]} is "
                                "gone: run without --together, or delete that run to redo it")
            print(f"scoring share {share:g}, seed {seed}: {len(ckpts)} models of "
                  f"{', '.join(r['mode'] for r in mine)} together", flush=True)
            rows.append({"share": share, "seed": seed, "models": len(ckpts),
                         "train_records": mine[0]["train_records"],
                         "metrics": side.score(ckpts, mine[0]["test_workloads"])})
    curves = {}
    for share in args.shares:
        mine = [r for r in rows if r["share"] == share]
        curves[f"{share:g}"] = {"seeds": [r["seed"] for r in mine], "models": mine[0]["models"],
                                "train_records": float(np.mean([r["train_records"]
                                                                for r in mine])),
                                **spread([r["metrics"] for r in mine])}
    return {"modes": args.modes, "curves": curves, "runs": rows}


# the source, untrained on the dataset, as lines: (label, key in summary["source"], style)
SOURCE_LINES = [("source, untrained", "metrics", ":"),
                ("source, untrained, as fine-tuning starts", "fine_tuning_start", "-.")]


def curve_label(summary: dict, mode: str) -> str:
    """A curve's name in the plot: the mode, or every mode's models together."""
    if mode == TOGETHER:
        return " + ".join(summary["modes"]) + ", all models as one ensemble"
    return mode + (f", ensembles of {summary['ensemble']}" if summary.get("ensemble", 1) > 1
                   else "")


def plotted_curves(summary: dict) -> dict:
    """Each mode's curve (per share), and with --together the one of all modes' models."""
    curves = dict(summary["curves"])
    if summary.get("together"):
        curves[TOGETHER] = summary["together"]["curves"]
    return curves


def plot(summary: dict, path: str) -> None:
    """Kendall tau and top-1 against the training records each share left (log x): both
    curves, the source as a line. Shares that leave the same records (a share keeps at least
    MIN_PER_WORKLOAD records of each workload) fall on one point, labelled with all of them."""
    import math

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodel.figures import save_figure

    curves = plotted_curves(summary)
    records = {}  # share -> training records it left
    for rows in curves.values():
        for share, row in rows.items():
            records.setdefault(share, row["train_records"])
    ticks = {}  # training records -> the shares that left them
    for share in sorted(records, key=float):
        ticks.setdefault(records[share], []).append(float(share))
    fig, axes = plt.subplots(1, len(PLOTTED), figsize=(10, 4.6))
    for ax, (metric, title) in zip(axes, PLOTTED.items()):
        for mode, rows in curves.items():
            shares = sorted(rows, key=float)
            cells = [rows[s][metric] for s in shares]
            keep = [i for i, c in enumerate(cells) if c is not None]
            ax.errorbar([records[shares[i]] for i in keep], [cells[i]["mean"] for i in keep],
                        yerr=[cells[i]["std"] for i in keep], marker="o", capsize=3,
                        label=curve_label(summary, mode))
        for label, source, style in SOURCE_LINES:
            scores = summary["source"].get(source) or {}  # older summaries: "metrics" only
            value = scores.get(metric)
            if value is not None and math.isfinite(value):
                if (ranked := scores.get("ranked_workloads")) is not None:
                    label += f" (ranks {ranked} of {summary['test_workloads']})"
                ax.axhline(value, color="gray", ls=style, label=label)
        if summary.get("reference"):
            ax.axhline(summary["reference"]["metrics"][metric], color="black", ls="--",
                       label="trained on all records (reference report)")
        ax.set(xscale="log", xlim=(min(ticks) / 1.5, max(ticks) * 1.5),
               xlabel="training records (share of the training side)", ylabel=title,
               title=f"{title} on held-out workloads")
        ax.set_xticks(list(ticks), [f"{n:,.0f}\n" + ", ".join(f"{s * 100:g}%" for s in shares)
                                    for n, shares in ticks.items()])
        ax.minorticks_off()
        ax.grid(alpha=0.3)
    legend = {}  # one legend, below, clear of points: every curve and line of either panel
    for ax in axes:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            legend.setdefault(label, handle)
    handles, labels = list(legend.values()), list(legend)
    columns = min(len(labels), 3 if max(map(len, labels)) < 45 else 2)  # long ones: 2 fit
    fig.legend(handles, labels, loc="lower center", ncol=columns, frameon=False)
    fig.tight_layout(rect=(0, 0.03 + 0.05 * math.ceil(len(labels) / columns), 1, 1))
    save_figure(fig, path)
    plt.close(fig)


def format_table(summary: dict) -> str:
    """One line per share: records, then each mode's mean metrics (± std over seeds)."""
    import math

    def cell(row, metric):
        if row is None or row.get(metric) is None:
            return f"{'n/a':>17}"
        return f"{row[metric]['mean']:>8.3f} ± {row[metric]['std']:<6.3f}"

    names = {"kendall_tau": "tau", "top1_score": "top-1", "mape": "MAPE"}
    modes = [mode for mode in MODES if mode in summary["curves"]]
    head = f"{'share':>6} {'records':>8} | " + " | ".join(
        f"{mode + ' ' + names[m]:>17}" for mode in modes for m in METRICS)
    lines = [head]
    shares = sorted({s for rows in summary["curves"].values() for s in rows}, key=float)
    for share in shares:
        rows = [summary["curves"].get(mode, {}).get(share) for mode in modes]
        records = next(r["train_records"] for r in rows if r)
        lines.append(f"{share:>6} {records:>8.0f} | " + " | ".join(
            cell(row, m) for row in rows for m in METRICS))
    for share, row in (summary.get("together") or {}).get("curves", {}).items():
        lines.append(f"share {share}, the {row['models']} models of "
                     f"{' and '.join(summary['modes'])} of each seed as one ensemble: " + ", ".join(
                         f"{names[m]} {cell(row, m).strip()}" for m in METRICS))
    for mode in modes:
        for share, row in summary["curves"][mode].items():
            if row.get("members"):
                lines.append(f"{mode} share {share}, the {summary['ensemble']} members of "
                             "each seed's ensemble alone: " + ", ".join(
                                 f"{names[m]} {cell(row['members'], m).strip()}"
                                 for m in METRICS))
    for label, source, _ in SOURCE_LINES:
        if not (src := summary["source"].get(source)):
            continue
        lines.append(label + ": " + ", ".join(
            f"{names[m]} {src[m]:.3f}" if src.get(m) is not None and math.isfinite(src[m])
            else f"{names[m]} n/a"
            for m in METRICS) + (f"; its predictions differ on {src['ranked_workloads']} of "
                                 f"{summary['test_workloads']} held-out workloads (tau is "
                                 "over those)" if "ranked_workloads" in src else ""))
    if summary.get("reference"):
        ref = summary["reference"]["metrics"]
        lines.append(f"all records ({summary['reference']['report']}): " + ", ".join(
            f"{names[m]} {ref[m]:.3f}" for m in PLOTTED))
    lines.append("(mean ± standard deviation over seeds; n/a: undefined in every seed, e.g. "
                 "tau of a model that predicts every held-out program alike)")
    return "\n".join(lines)


def run_checkpoints(args, result: dict) -> list[str]:
    """The checkpoints of a finished run (all members of an ensemble)."""
    return [os.path.join(args.out, c) for c in result.get("checkpoints", [result["checkpoint"]])]


def teach(args, teachers: list[dict], train_keys: list[str], side: HeldOut, path: str) -> int:
    """Write to `path` (Parquet, `costmodel.data_module.PSEUDO_COLUMNS`) the latencies that the
    `teachers` runs' models, as one ensemble, predict for every record of the training
    workloads `train_keys` that featurises (the student takes those outside its share); how
    many."""
    from costmodel import featurize
    from costmodel.predictor import CostModelPredictor

    ckpts = [c for r in teachers for c in run_checkpoints(args, r)]
    predictor = CostModelPredictor.load(ckpts, cache_dir=side.cache_dir, device=side.device)
    frame = side.frame[side.frame.workload_key.isin(train_keys)]
    frame = frame.drop_duplicates(["workload_key", "trace_hash"]).reset_index(drop=True)
    graphs = list(predictor.featurizer.iter_records(
        zip(frame.workload_ir, frame.trace, frame.trace_hash)))
    ok = np.array([not isinstance(g, featurize.FeaturizeError) for g in graphs], bool)
    frame = frame[ok].reset_index(drop=True)
    latency = predictor.predict_graphs([g for g, good in zip(graphs, ok) if good],
                                       frame.workload_key.to_numpy())
    table = pd.DataFrame({"workload_key": frame.workload_key.astype(str),
                          "trace_hash": frame.trace_hash.astype(str), "latency": latency})
    os.makedirs(os.path.dirname(path) or ".", exist_ok=True)
    from datagen.errors import atomic_path

    with atomic_path(path, ".parquet") as tmp:
        table.to_parquet(tmp, index=False)
    return len(table)


def run(args, architecture: dict, mode: str, share: float, seed: int, work: str,
        side: HeldOut, wanted: dict, teacher: str | None = None) -> dict:
    """Train and score one (mode, share, seed): one model, or with --ensemble K, K members in
    `work`/memberM trained on the same share, scored together and each alone; `teacher`: the
    self-trained mode's pseudo-labels."""
    from costmodel import checkpoint

    print(f"training {mode}, share {share:g}, seed {seed} ...", flush=True)
    if args.ensemble == 1:
        ckpts = [train(args, architecture, mode, share, seed, work, teacher=teacher)]
    else:
        shutil.rmtree(work, ignore_errors=True)  # members of an unfinished run start over
        ckpts = []
        for m in range(args.ensemble):
            print(f"  member {m + 1} of {args.ensemble}", flush=True)
            ckpts.append(train(args, architecture, mode, share, seed,
                               os.path.join(work, f"member{m}"),
                               train_seed=seed + m * ENSEMBLE_SEED_STEP, teacher=teacher))
    meta = checkpoint.read(ckpts[0])[checkpoint.META_KEY]
    test = meta["sides"]["test"]
    result = {"mode": mode, "share": share, "seed": seed, "settings": wanted,
              "checkpoint": os.path.relpath(ckpts[0], args.out),
              "train_records": meta["train_share"]["records"],
              "train_records_of": meta["train_share"]["of"],
              "joint_records": joint_records(meta),
              "pseudo_records": meta["train_share"].get("pseudo", {}).get("records"),
              "test_workloads": test, "metrics": side.score(ckpts, test)}
    if args.ensemble > 1:
        result["checkpoints"] = [os.path.relpath(c, args.out) for c in ckpts]
        result["members"] = [side.score(c, test) for c in ckpts]
    return result


def bench(args) -> int:
    from costmodel import checkpoint
    from costmodel.predictor import torch_device
    from datagen.errors import UserError, output_folder
    from costmodel.splits import check_share, split_workloads

    for share in args.shares:
        check_share(share)
    if args.ensemble < 1:
        raise UserError(f"--ensemble must be a positive number of models, not {args.ensemble}")
    if args.together and len(args.modes) < 2:
        raise UserError("--together scores the models of several modes as one: give two or "
                        "more --modes")
    if args.steps is not None and args.steps < 1:
        raise UserError(f"--steps must be a positive number of optimiser steps, not {args.steps}")
    check_share(args.joint_share, "--joint-share")
    if SELF_TRAINED in args.modes:
        if len(args.modes) < 2:
            raise UserError(f"{SELF_TRAINED} learns from the models of the other --modes: give "
                            "one or more besides it")
        if 1.0 in args.shares:
            raise UserError(f"{SELF_TRAINED} labels the records a share leaves out: give "
                            "--shares below 1 with it")
    if args.accelerator == "gpu":
        torch_device("cuda")  # no CUDA: one line before any training
    source = checkpoint.load(args.init_from)
    architecture = source.model.architecture
    args.joint_dataset = args.joint_dataset or [source.meta["dataset"]]
    side = HeldOut(args)
    expected = split_workloads(side.frame, args.split, args.test_fraction,
                               args.test_families or [], args.val_fraction, args.split_seed,
                               args.test_networks)
    check_no_leak(source.meta, side.frame.target.iloc[0], expected["test"])
    reference = args.reference and read_reference(  # before any training: a bad one fails now
        args.reference, args.dataset, len(side.records(expected["test"])))
    wanted = settings(args, len(side.frame))
    output_folder(args.out)
    grid = Grid(args.out)
    teachers = [m for m in args.modes if m != SELF_TRAINED]
    cells = [(share, seed, mode) for share in args.shares for seed in args.seeds
             for mode in teachers + [m for m in args.modes if m == SELF_TRAINED]]
    # every finished run first: one made with other settings is refused before any training
    found = {cell: grid.read(run_cell(*cell), run_settings(wanted, cell[2], teachers),
                             added=ADDED_SETTINGS)
             for cell in cells}
    runs = []
    for (share, seed, mode), result in found.items():
        work = os.path.dirname(grid.path(run_cell(share, seed, mode)))
        if result is None:
            teacher = None
            if mode == SELF_TRAINED:  # its labels, from this share and seed's models
                teacher = f"{work}.teacher.parquet"
                n = teach(args, [r for r in runs if (r["share"], r["seed"]) == (share, seed)],
                          expected["train"], side, teacher)
                print(f"  {n} training records labelled by the {', '.join(teachers)} models",
                      flush=True)
            result = grid.write(run_cell(share, seed, mode), run(
                args, architecture, mode, share, seed, work, side,
                run_settings(wanted, mode, teachers), teacher))
        else:
            print(f"read back {mode}, share {share:g}, seed {seed}", flush=True)
            side.records(result["test_workloads"])  # the same split as the others
        runs.append(result)
    if side.keys is None:
        raise UserError("no runs: give --shares and --seeds")
    summary = {"dataset": args.dataset, "init_from": args.init_from,
               "source_target": source.meta["target"], "split": args.split,
               "test_workloads": len(side.keys),
               "test_records": len(side.records(side.keys)), "shares": args.shares,
               "seeds": args.seeds, "ensemble": args.ensemble, "max_epochs": args.max_epochs,
               "steps": args.steps,
               "modes": args.modes,
               "normalize_per_workload": args.normalize_per_workload,
               **({"joint_dataset": args.joint_dataset, "joint_share": args.joint_share}
                  if set(JOINT_MODES) & set(args.modes) else {}),
               "source": {"metrics": side.score(args.init_from, side.keys, count_ranked=True),
                          "fine_tuning_start": side.score_as_fine_tuning_starts(
                              args.init_from, expected["train"], side.keys)},
               "reference": reference,
               "curves": summarize(runs, args.shares), "runs": runs,
               "together": together(args, runs, side) if args.together else None}
    write_json(os.path.join(args.out, "summary.json"), summary, indent=1)
    plot(summary, os.path.join(args.out, "transfer.png"))
    print(f"== transfer of {args.init_from} to {args.dataset}: {summary['test_workloads']} "
          f"held-out workloads, {summary['test_records']} records, seeds {args.seeds}, "
          + (f"{args.steps} steps each ==" if args.steps else
             f"at most {args.max_epochs} epochs =="))
    print(format_table(summary))
    print(f"summary.json and transfer.png in {args.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    from datagen.errors import run_command

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", help="the target's records (datagen folder; required)")
    parser.add_argument("--init-from", help="the checkpoint to transfer (required)")
    parser.add_argument("--shares", nargs="+", type=float, default=[0.01, 0.05, 0.1, 1.0])
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2],
                        help="each seeds the share's draw and the training")
    parser.add_argument("--split", choices=TRANSFER_SPLITS, default="shapes",
                        help="how the target's workloads are held out (`train fit`'s "
                             "`--data.split`; cross-suite needs a test dataset, so it is not "
                             "one here)")
    parser.add_argument("--test-fraction", type=float, default=0.2)
    parser.add_argument("--test-families", nargs="*",
                        help="with --split family or unseen-family")
    parser.add_argument("--test-networks", nargs="*", help="with --split network")
    parser.add_argument("--val-fraction", type=float, default=0.1)
    parser.add_argument("--split-seed", type=int, default=0, help="seeds the split, for every run")
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--steps", type=int,
                        help="train every run this many optimiser steps whatever its share "
                             "(an epoch of a small share is a few steps: 30 epochs of 5%% "
                             "are a twelfth of the steps of 30 on all records), validating "
                             "--max-epochs times")
    parser.add_argument("--ensemble", type=int, default=1, metavar="K",
                        help="each run: K models on the same share (training seeds S, "
                             "S + 1000, ...), scored as one ensemble and each alone")
    parser.add_argument("--together", action="store_true",
                        help="also score each share and seed's models of every mode as one "
                             "ensemble (from the runs' checkpoints; trains nothing more)")
    parser.add_argument("--finetune-lr", type=float,
                        help="learning rate of the fine-tuned runs (default: the config's)")
    parser.add_argument("--freeze", nargs="+", metavar="PART",
                        help="fine-tuned runs keep these parts of the model as --init-from "
                             "trained them (`--model.freeze`, e.g. layers norms)")
    parser.add_argument("--modes", nargs="+", choices=MODES, default=["scratch", "finetuned"],
                        help="which models to train per share and seed")
    parser.add_argument("--joint-dataset", nargs="+",
                        help="joint modes: the other datasets that train beside the share, "
                             "a head per target with joint_heads "
                             "(default: the one --init-from was trained on)")
    parser.add_argument("--joint-share", type=float, default=0.25,
                        help="joint modes: the share of each --joint-dataset's records they "
                             "train on")
    parser.add_argument("--normalize-per-workload", action="store_true",
                        help="labels standardised within each workload, in every mode")
    parser.add_argument("--warp-features", action="store_true",
                        help="every mode's model also reads warp features (the GPU recipe); "
                             "a source without them is widened to read them "
                             "(`costmodel.lightning_module.widen_with_node_features`)")
    parser.add_argument("--reference", metavar="REPORT",
                        help="a `costmodel evaluate` report.json of the same held-out records "
                             "(the model trained on all of them): its mean tau and top-1 drawn "
                             "as a line and printed")
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu",
                        help="trains on it (one device) and scores on it")
    parser.add_argument("--config", default=CONFIG, help="base `train fit` config")
    parser.add_argument("--cache-dir", default=".cache/features")
    parser.add_argument("--out", default="bench/results/transfer")
    parser.add_argument("--report", action="store_true",
                        help="train nothing: print --out's table and draw its transfer.png "
                             "again from its summary.json (or summary.json.xz)")
    args = parser.parse_args(argv)
    if args.report:
        return run_command("transfer", report, args)
    missing = [f"--{n}" for n in ("dataset", "init-from") if not getattr(args, n.replace("-", "_"))]
    if missing:
        parser.error(f"the following arguments are required: {', '.join(missing)}")
    return run_command("transfer", bench, args)


def report(args) -> int:
    """--report: the table and plot of a finished benchmark, from its summary."""
    from datagen.errors import UserError
    from datagen.grid import read_json

    path = os.path.join(args.out, "summary.json")
    try:
        summary = read_json(path + ".xz")  # or the plain file, where it is not compressed
        table = format_table(summary)
    except FileNotFoundError:
        raise UserError(f"{args.out} holds no summary.json: run the benchmark into it "
                        "first") from None
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise UserError(f"{path} is no readable transfer summary ({err}); run the benchmark "
                        "into another --out") from None
    print(table)
    plot(summary, os.path.join(args.out, "transfer.png"))
    print(f"transfer.png in {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
