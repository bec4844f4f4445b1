"""Benchmark: the held-out network tasks' schedules measured again on this host, to see how far
the dataset's labels hold, and the cost model's ranking with them, on another day and CPU.

The training fit of cost model v2 stops near Kendall tau 0.70 while one repeat of a held-out
record ranks another at 0.94 (`bench/ablations.py --diagnose`). But repeats are timed back to
back; a label can also move between measurements taken hours apart, and a user's CPU is not the
one the dataset was measured on. This script takes a seeded sample of the held-out tasks of
--config (by default cost model v2's split: every task only in ResNet-50, MobileNetV2 or the
T5-small encoder), replays every successfully measured schedule of each task from its trace,
builds it for this host's CPU (LLVM's name for it, `num-cores` the runtime threads) and times
it with the dataset's own protocol twice, interleaved over the task's schedules (A B C, A B C),
so that a slow spell of the machine hits them alike. Per task it scores, with the metrics of
`costmodel evaluate` (Kendall tau per task, TenSet's top-1 score, weighted by each task's count):

- "here_vs_here": the first round ranked by the second (the labels' reproducibility on one
  host, measured minutes apart: the ceiling of any model against this host's labels);
- "dataset_vs_here": the dataset's labels ranked by this host's (both rounds' median);
- the checkpoint and its pretrained XGBModel (`NAME.xgb.npz`, MetaSchedule's model on the same
  training records) against the dataset's labels and against this host's;
- with --adapt K: the checkpoint corrected by K of each task's schedules as measured here, on
  the task's other schedules, beside the model alone and the dataset's labels on those: the
  way `bo` corrects it while tuning (a GP on the graph embeddings fitted to the residual) and
  the way `ms-ours` does (the network fine-tuned on them).

Measuring shares nothing with other timed work: run it on a quiet machine (it says how long it
took). Each finished task is one line of --out/tasks.jsonl.xz, which a later run reads back (an
interrupted run resumes; more --tasks measure only the new ones); measurements made with other
settings (dataset, host CPU, protocol) are refused: use another --out. Writes
--out/summary.json (overall and per-task scores) and --out/remeasure.png (each ranking's
per-task tau as a box plot) for the tasks asked for.

    python bench/remeasure_heldout.py [--tasks 32] [--seed 0] [--adapt 4 8 16] \\
        [--checkpoint bench/models/graphsage-v2-networks.ckpt] [--out bench/results/remeasure]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

import numpy as np
import pandas as pd

ROOT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
CONFIG = os.path.join(ROOT, "configs", "graphsage-networks.yaml")
CHECKPOINT = "graphsage-v2-networks.ckpt"  # an evaluation checkpoint (bench/evaluation_models.py)
ROUNDS = 2
TASKS = "tasks.jsonl.xz"  # a line per measured task: the cells of the benchmark's `Grid`
ADAPT_DRAWS = 2  # seeded draws of the measured schedules per task, for --adapt


def held_out(config: str, dataset: str | None) -> tuple[pd.DataFrame, str]:
    """The held-out side's usable records of the config's split, and the dataset folder."""
    import yaml

    from datagen.records import read_records
    from costmodel.splits import RECORD_COLUMNS, check_one_target, split_workloads, usable

    with open(config, encoding="utf-8") as handle:
        data = yaml.safe_load(handle)["data"]
    dataset = dataset or data["dataset"]
    frame, _ = usable(read_records(dataset, RECORD_COLUMNS + ["protocol"]))
    check_one_target(frame, dataset)
    sides = split_workloads(frame, data.get("split", "network"), data.get("test_fraction", 0.2),
                            data.get("test_families") or [], data.get("val_fraction", 0.1),
                            data.get("seed", 0), data.get("test_networks"))
    return frame[frame.workload_key.isin(sides["test"])].reset_index(drop=True), dataset


def measure_task(records: pd.DataFrame, measurer) -> list[list[float] | None]:
    """Per record: this host's median latency of each round (None where it failed)."""
    import tvm

    from datagen.sampler import replay

    workload = tvm.ir.load_json(records.workload_ir.iloc[0])
    mods = [replay(workload, trace).mod for trace in records.trace]
    rounds = measurer.remeasure(mods, ROUNDS)
    return [[r.median for r in runs] if all(r.median for r in runs) else None
            for runs in rounds]


def scores(frame: pd.DataFrame, truth: str, predicted: np.ndarray) -> dict:
    """Kendall tau (mean over tasks) and top-1 score of `predicted` (lower is faster) against
    the latency column `truth`."""
    from costmodel.metrics import kendall_tau, top_k_score

    labels = frame[truth].to_numpy()
    return {"kendall_tau": kendall_tau(frame.workload_key, labels, predicted),
            "top1_score": top_k_score(frame.workload_key, labels, predicted, 1,
                                      frame.workload_weight)}


def per_task_tau(frame: pd.DataFrame, truth: str, predicted: np.ndarray) -> pd.Series:
    """Kendall tau of `predicted` against `truth`, task by task."""
    from costmodel.metrics import kendall_tau

    labels = frame[truth].to_numpy()
    return pd.Series({key: kendall_tau(np.zeros(len(rows)), labels[rows], predicted[rows])
                      for key, rows in frame.groupby("workload_key").indices.items()})


def model_predictions(frame: pd.DataFrame, checkpoint: str, cache_dir: str | None) -> dict:
    """Log-latency-like scores (lower is faster) of the checkpoint ("model") and its XGBModel
    ("xgb"), with what `adapted` needs: the checkpoint's graph embeddings, its predictor and
    the records' graphs."""
    from costmodel.featurize import FeaturizeError
    from costmodel.predictor import CostModelPredictor
    from datagen.tvm_env import make_target
    from costmodel.store_models import load_xgb, predict_xgb
    from costmodel.pretrained_xgb import beside, fingerprint

    predictor = CostModelPredictor.load(checkpoint, cache_dir=cache_dir)
    graphs = list(predictor.featurizer.iter_records(
        zip(frame.workload_ir, frame.trace, frame.trace_hash)))
    if failed := next((g for g in graphs if isinstance(g, FeaturizeError)), None):
        raise failed
    seconds, embeddings = predictor.predict_and_embed(graphs)
    out = {"model": np.log(seconds), "embeddings": embeddings,
           "predictor": predictor, "graphs": graphs}
    xgb = beside(checkpoint)
    if os.path.exists(xgb):
        model = load_xgb(xgb, fingerprint(predictor.meta))
        target = make_target(json.loads(frame.target.iloc[0]))
        out["xgb"] = -np.asarray(predict_xgb(model, frame, target), float)  # throughput-like
    return out


def adapted(frame: pd.DataFrame, model: dict, labels: str, measured: int, draws: int,
            seed: int) -> dict:
    """The model corrected by `measured` of each task's schedules timed here, scored on the
    task's other schedules beside the model alone and the dataset's labels on the same ones
    (mean over `draws` seeded draws), two ways: "gp", as `bo` corrects it while tuning (its
    surrogate: a GP on the graph embeddings fitted to the residual of log-latency from the
    model's prediction); "finetuned", as `ms-ours` does (the network fine-tuned on them with
    its loss, `tuning.cost_model`'s steps and learning rate), from the checkpoint's weights
    for every task; "finetuned_gp", both (the GP on the fine-tuned network's residual and
    embeddings)."""
    import copy

    from costmodel.metrics import kendall_tau, top_k_score
    from tuning.cost_model import ADAPT_LR, ADAPT_STEPS
    from tuning.search import PriorGP

    import torch

    torch.manual_seed(seed * 1000 + measured)  # fine-tuning draws dropout masks
    prior, embeddings = model["model"], model["embeddings"]
    predictor, graphs = model["predictor"], model["graphs"]
    weights = [copy.deepcopy(m.model.state_dict()) for m in predictor.members]
    latency = frame[labels].to_numpy()
    truth = np.log(latency)
    rows = {"gp": [], "finetuned": [], "finetuned_gp": [], "model": [], "dataset": []}
    for draw in range(draws):
        rng = np.random.default_rng([seed, measured, draw])
        keys, rest, scored = [], [], {name: [] for name in rows}
        for key, index in frame.groupby("workload_key").indices.items():
            if len(index) < measured + 2:
                continue
            chosen = rng.permutation(len(index))
            train, test = index[chosen[:measured]], index[chosen[measured:]]
            gp = PriorGP(None, seed)
            gp.fit(list(embeddings[index]), list(embeddings[train]), prior[train], truth[train])
            scored["gp"].append(gp.posterior(list(embeddings[test]), prior[test])[0])
            predictor.adapt([graphs[i] for i in train], latency[train], [0] * len(train),
                            steps=ADAPT_STEPS, lr=ADAPT_LR)
            seconds, emb = predictor.predict_and_embed([graphs[i] for i in index])
            tuned = dict(zip(index, np.log(seconds)))
            tuned_emb = dict(zip(index, emb))
            scored["finetuned"].append(np.array([tuned[i] for i in test]))
            gp = PriorGP(None, seed)  # both: bo's GP on the fine-tuned network's residual
            gp.fit(list(emb), [tuned_emb[i] for i in train], np.array([tuned[i] for i in train]),
                   truth[train])
            scored["finetuned_gp"].append(gp.posterior([tuned_emb[i] for i in test],
                                                       np.array([tuned[i] for i in test]))[0])
            for member, state in zip(predictor.members, weights):
                member.model.load_state_dict(state)
            scored["model"].append(prior[test])
            scored["dataset"].append(np.log(frame.latency_median.to_numpy()[test]))
            keys += [key] * len(test)
            rest.append(test)
        rest = np.concatenate(rest)
        for name in rows:
            predicted = np.concatenate(scored[name])
            rows[name].append((kendall_tau(keys, latency[rest], predicted),
                               top_k_score(keys, latency[rest], predicted, 1,
                                           frame.workload_weight.to_numpy()[rest])))
    return {name: {"kendall_tau": float(np.mean([r[0] for r in runs])),
                   "top1_score": float(np.mean([r[1] for r in runs]))}
            for name, runs in rows.items()}


def summarise(frame: pd.DataFrame, checkpoint: str, cache_dir: str | None,
              adapt: list[int], seed: int) -> dict:
    first = frame.here.map(lambda r: r[0]).to_numpy()
    second = frame.here.map(lambda r: r[1]).to_numpy()
    frame = frame.assign(here_median=np.sqrt(first * second), here_first=first)
    rows = {"here_vs_here": scores(frame, "here_first", second),
            "dataset_vs_here": scores(frame, "latency_median", frame.here_median.to_numpy())}
    predicted = model_predictions(frame, checkpoint, cache_dir)
    model = {k: predicted.pop(k) for k in ("embeddings", "predictor", "graphs")}
    model["model"] = predicted["model"]
    for name, scores_ in predicted.items():
        rows[f"{name}_vs_dataset"] = scores(frame, "latency_median", scores_)
        rows[f"{name}_vs_here"] = scores(frame, "here_median", scores_)
    per_task = pd.DataFrame({
        "here_vs_here": per_task_tau(frame, "here_first", second),
        "dataset_vs_here": per_task_tau(frame, "latency_median", frame.here_median.to_numpy()),
        **{f"{n}_vs_here": per_task_tau(frame, "here_median", s) for n, s in predicted.items()},
        **{f"{n}_vs_dataset": per_task_tau(frame, "latency_median", s)
           for n, s in predicted.items()}})
    ratio = frame.here_median / frame.latency_median
    return {"overall": rows, "per_task_tau": {c: {k: float(v) if np.isfinite(v) else None
                                                 for k, v in per_task[c].items()}
                                             for c in per_task},
            "per_task_tau_quartiles": {c: [float(q) for q in per_task[c].quantile([.25, .5, .75])]
                                       for c in per_task},
            "here_over_dataset_latency_quartiles": [float(q) for q in ratio.quantile([.25, .5, .75])],
            "round_spread_median": float(np.median(np.abs(np.log(first / second)))),
            "adapted_here": {str(k): adapted(frame, model, "here_median", k, ADAPT_DRAWS, seed)
                             for k in adapt}}


def plot(summary: dict, path: str) -> None:
    """Per-task Kendall tau of each ranking (who ranks, against which labels) as box plots."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodel.figures import save_figure

    names = list(summary["per_task_tau"])
    values = [[v for v in summary["per_task_tau"][n].values() if v is not None] for n in names]
    fig, ax = plt.subplots(figsize=(9, 4.2))
    ax.boxplot(values, vert=False, tick_labels=[n.replace("_vs_", " vs ") for n in names])
    ax.invert_yaxis()
    ax.set_xlabel("Kendall tau per task (who ranks vs. which labels)")
    ax.set_title(f"{len(summary['tasks'])} held-out tasks, {summary['records']} schedules: "
                 "dataset's labels vs. measured again here", fontsize=10)
    ax.grid(axis="x", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path)
    plt.close(fig)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--config", default=CONFIG, help="the split's config (its data section)")
    parser.add_argument("--dataset", help="default: the config's")
    parser.add_argument("--checkpoint",
                        help="a checkpoint that held these tasks out (its XGBModel beside it; "
                        f"default: the evaluation checkpoint {CHECKPOINT})")
    parser.add_argument("--tasks", type=int, default=32, help="held-out tasks to measure")
    parser.add_argument("--seed", type=int, default=0, help="which tasks")
    parser.add_argument("--out", default=os.path.join(ROOT, "bench", "results", "remeasure"))
    parser.add_argument("--cache-dir", default=".cache/features")
    parser.add_argument("--adapt", type=int, nargs="*", default=[4, 8, 16], metavar="K",
                        help="also score the model corrected by K schedules of each task "
                        "measured here, as bo and ms-ours correct it while tuning")
    args = parser.parse_args(argv)

    from datagen.errors import UserError, output_folder
    from datagen.grid import Grid, write_json
    from datagen.measure import Measurer
    from datagen.tvm_env import describe_target, host_cpu, make_target, target_json

    try:
        if args.checkpoint is None:
            sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
            import evaluation_models  # a sibling script

            args.checkpoint = evaluation_models.path(CHECKPOINT)
        frame, dataset = held_out(args.config, args.dataset)
        keys = sorted(frame.workload_key.unique())
        keys = list(np.random.default_rng(args.seed).choice(keys, min(args.tasks, len(keys)),
                                                            replace=False))
        target = make_target(None)
        protocol = json.loads(frame.protocol.iloc[0])
        settings = {"dataset": os.path.relpath(dataset, ROOT) if os.path.isabs(dataset) else dataset,
                    "target_here": target_json(target), "protocol": protocol, "rounds": ROUNDS}
        output_folder(args.out)
        grid = Grid(args.out, settings)  # measurements of another dataset, CPU or protocol: refused
        done = {line["workload_key"]: line for line in grid.lines(TASKS)
                if line["workload_key"] in keys}
        print(f"{len(keys)} held-out tasks of {dataset} ({frame.workload_key.isin(keys).sum()} "
              f"records) on {describe_target(target_json(target))} ({host_cpu()}); "
              f"{len(done)} measured already", flush=True)
        todo = [k for k in keys if k not in done]
        if todo:
            measurer = Measurer(target, protocol)
            start = time.perf_counter()
            try:
                for i, key in enumerate(todo):
                    records = frame[frame.workload_key == key]
                    line = {"workload_key": key, "trace_hash": list(records.trace_hash),
                            "here": measure_task(records, measurer)}
                    grid.add_line(TASKS, line)
                    done[key] = line
                    print(f"  {i + 1}/{len(todo)} {key}: {len(records)} schedules, "
                          f"{time.perf_counter() - start:.0f} s", flush=True)
            finally:
                measurer.close()
            print(f"measured in {time.perf_counter() - start:.0f} s", flush=True)
    except UserError as err:
        print(f"remeasure_heldout: error: {err}", file=sys.stderr)
        return 2

    here = {}
    for line in done.values():
        here.update(zip(line["trace_hash"], line["here"]))
    measured = frame[frame.workload_key.isin(keys)].assign(here=frame.trace_hash.map(here))
    failed = int(measured.here.isna().sum())
    measured = measured[measured.here.notna()].reset_index(drop=True)
    summary = {"settings": settings, "tasks": keys, "records": len(measured), "failed_here": failed,
               "checkpoint": os.path.relpath(args.checkpoint, ROOT),
               **summarise(measured, args.checkpoint, args.cache_dir, args.adapt, args.seed)}
    write_json(os.path.join(args.out, "summary.json"), summary, indent=1)
    plot(summary, os.path.join(args.out, "remeasure.png"))
    print(f"{len(measured)} schedules of {len(keys)} tasks ({failed} failed here):")
    print(f"  {'who ranks':<18} {'against':<10} {'tau':>6} {'top-1':>6}")
    for name, row in summary["overall"].items():
        who, _, against = name.partition("_vs_")
        print(f"  {who:<18} {against:<10} {row['kendall_tau']:>6.3f} {row['top1_score']:>6.3f}")
    for k, rows in summary["adapted_here"].items():
        print(f"  with {k} schedules of each task measured here, on the others (against here): "
              + "; ".join(f"{name} tau {row['kendall_tau']:.3f}, top-1 {row['top1_score']:.3f}"
                          for name, row in rows.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
