"""`costmodel evaluate`: score checkpoints and the tree baselines on a held-out split.

Writes `report.json` (every metric, overall, per family and per network, per checkpoint and
baseline, with the mean and spread over checkpoints trained with different seeds), a readable
`report.md`, and plots: predicted against measured latency, and per-workload Kendall tau of
each model. `write_markdown` (`costmodel report`) writes `report.md` again from a kept
`report.json` (or `report.json.xz`, as results are kept in git). The baselines are
`costmodel.baselines.BASELINES` (MetaSchedule's XGBModel, TenSet's LightGBM and MLP,
`costmodel.store_models`), trained on the checkpoint's training workloads, once per checkpoint
seed (on its own split, on the records it trained on: of a few-shot checkpoint, its share).

A record counts for each network its `network` cell lists. Models that predict no latency (the
baselines' relative throughput, a checkpoint trained with per-workload normalisation) have no
MAPE: it is reported as None ("n/a").
"""

from __future__ import annotations

import json
import os

import numpy as np
import pandas as pd

from costmodel.blend import TITLES
from datagen.errors import UserError, atomic_path, output_folder
from datagen.records import read_records
from datagen.tvm_env import make_target
from costmodel.splits import (OUT_OF_DISTRIBUTION, RECORD_COLUMNS, check_one_target, head_for,
                              leave_out_joint_workloads, record_networks, records_trained_on,
                              split_workloads, usable)
from costmodel.metrics import all_metrics, kendall_tau

GRAPHSAGE = "graphsage"
# metrics that compare predicted with measured latency: None for a model that predicts none
# (a throughput relative to each workload's best, or a per-workload relative score); the
# others use only each workload's predicted order
NOT_LATENCY = ("mape",)


def _blended_with(companion) -> dict | None:
    """What a report says of a predictor's companions: the (first) file, the models and the
    network's share; where several blend, every file and each model's share too."""
    if companion is None:
        return None
    out = {"file": os.path.basename(companion.path), "with": companion.name,
           "weight": companion.weight}
    if len(companion.models) > 1:
        out["files"] = [os.path.basename(p) for p in companion.paths]
        out["shares"] = [round(float(s), 6) for s in companion.shares]
    return out


def grouped_metrics(frame: pd.DataFrame, predicted: np.ndarray, latency: bool) -> dict:
    """Metrics overall, per family, per network and per workload; `predicted` orders like
    latency (lower is faster), and is a latency if `latency`. A record counts for every network
    it lists."""
    def score(mask):
        part = frame[mask]
        m = all_metrics(part.workload_key, part.latency_median, predicted[mask],
                        part.workload_weight)
        return {k: (v if latency or k not in NOT_LATENCY else None) for k, v in m.items()}

    families = frame.family.to_numpy()
    networks = [set(record_networks(n)) for n in frame.network]
    return {"overall": score(np.ones(len(frame), bool)),
            "per_family": {fam: score(families == fam) for fam in sorted(set(families))},
            "per_network": {net: score(np.array([net in n for n in networks]))
                            for net in sorted(set().union(*networks))},
            "per_workload": {key: score(frame.workload_key.to_numpy() == key)
                             for key in sorted(frame.workload_key.unique())}}


def score(predictor, test: pd.DataFrame, predictions: np.ndarray | None = None) -> dict:
    """The report's metrics of one `CostModelPredictor` on the records `test` (its
    `predictions` of them, if already made): overall, per family and per network; MAPE is
    None if it predicts no latency."""
    if predictions is None:
        predictions = predictor.predict_records(test)
    return grouped_metrics(test, predictions, latency=predictor.predicts_latency)


def _spread(runs: list[dict]) -> tuple[dict, dict]:
    keys = runs[0]["overall"].keys()
    vals = {k: [r["overall"][k] for r in runs if r["overall"][k] is not None] for k in keys}
    mean = {k: float(np.mean(v)) if v else None for k, v in vals.items()}
    std = {k: float(np.std(v)) if v else None for k, v in vals.items()}
    return mean, std


def _plots(test: pd.DataFrame, preds: dict[str, np.ndarray], out: str,
           latency: bool = True) -> list[str]:
    """The plots; `latency`: GraphSAGE's predictions are latencies (else relative scores)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from costmodel.figures import save_figure

    files = []
    fig, ax = plt.subplots(figsize=(5.5, 5))
    measured = test.latency_median.to_numpy() * 1e6
    pred = preds[GRAPHSAGE] * (1e6 if latency else 1.0)
    ax.scatter(measured, pred, s=4, alpha=0.4)
    if latency:
        lo, hi = min(measured.min(), pred.min()), max(measured.max(), pred.max())
        ax.plot([lo, hi], [lo, hi], "k--", lw=1)
    ax.set(xscale="log", yscale="log", xlabel="measured latency (us)",
           ylabel="predicted latency (us)" if latency
           else "predicted score relative to its workload (not a latency)",
           title="GraphSAGE on held-out workloads")
    fig.tight_layout()
    files.append(os.path.join(out, "predicted_vs_measured.png"))
    save_figure(fig, files[-1])
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
    save_figure(fig, files[-1])
    plt.close(fig)
    return files


def _markdown(report: dict, missing: tuple[str, ...] = ()) -> str:
    """The readable report; plots named in `missing` (not beside it) are named, not shown."""
    names = list(report["models"])
    metrics = list(report["models"][names[0]]["mean"])
    lines = [f"# Cost-model evaluation: {report['split']} split",
             "", f"Dataset `{report['dataset']}`"
             + (f" (trained on `{report['train_dataset']}`)" if report.get("train_dataset")
                else "") + f"; {report['test_workloads']} held-out workloads "
             f"({', '.join(report['test_families'])}"
             + (f"; networks {', '.join(report['test_networks'])}"
                if report.get("test_networks") else "") + "), "
             f"{report['test_records']} records; trained on {report['train_workloads']} "
             "workloads" + (f"; {report['left_out_joint_workloads']} workloads left out, which "
                            "a joint dataset of the checkpoint holds"
                            if report.get("left_out_joint_workloads") else "") + ".",
             "", "| model | " + " | ".join(metrics) + " |",
             "|---" * (len(metrics) + 1) + "|"]
    for name in names:
        m, s = report["models"][name]["mean"], report["models"][name]["std"]
        cells = ["n/a" if m[k] is None else f"{m[k]:.3f} ± {s[k]:.3f}" for k in metrics]
        lines.append(f"| {name} ({report['models'][name]['runs']} run(s)) | "
                     + " | ".join(cells) + " |")
    for blended in filter(None, report["models"][GRAPHSAGE].get("blended_with", [])):
        kinds = blended.get("with", "lightgbm").split("+")
        files = blended.get("files", [blended["file"]])
        shares = blended.get("shares", [1 - blended["weight"]])
        trees = " and ".join(f"{TITLES[n]} (`{f}`, {s:g})"
                             for n, f, s in zip(kinds, files, shares))
        lines += ["", f"{GRAPHSAGE} blends the network ({blended['weight']:g}) with {trees} "
                  "fitted on the same training records, each standardised within each "
                  "workload: it predicts what `tune` uses."]
        break
    if not report["models"][GRAPHSAGE].get("predicts_latency", True):
        lines += ["", f"{GRAPHSAGE} was trained with per-workload normalisation: it predicts a "
                  "score relative to each workload, not a latency, so it has no MAPE."]
    for part, title in (("per_family", "family"), ("per_network", "network")):
        if not any(report["models"][name]["per_run"][0].get(part) for name in names):
            continue  # e.g. records that name no network
        lines += ([""] if lines[-1] else []) + [f"## Per {title} (first run of each model)", ""]
        if part == "per_network":
            lines += ["A record counts for every network it occurs in.", ""]
        for name in names:
            rows = report["models"][name]["per_run"][0][part]
            lines += [f"### {name}", "", f"| {title} | " + " | ".join(metrics) + " |",
                      "|---" * (len(metrics) + 1) + "|"]
            for key, m in rows.items():
                lines.append(f"| {key} | " + " | ".join("n/a" if m[k] is None else f"{m[k]:.3f}"
                                                        for k in metrics) + " |")
            lines.append("")
    lines += [f"![{os.path.splitext(p)[0].replace('_', ' ')}]({p})" for p in report["plots"]
              if p not in missing]
    if missing:
        lines.append(f"(The run also drew {' and '.join(f'`{p}`' for p in missing)}; "
                     f"{'they are' if len(missing) > 1 else 'it is'} not kept here: "
                     "`costmodel evaluate` draws them again.)")
    return "\n".join(lines) + "\n"


def write_markdown(report_path: str, out: str | None = None) -> str:
    """Write the readable report of the `report.json` (or `report.json.xz`) at `report_path`
    to `out` (default: `report.md` beside it, where its plots are); return the path written.
    Plots not beside `out` (results in git keep none) are named instead of shown.

    Raises:
        UserError: no such file, or it is not a report of `costmodel evaluate`.
    """
    from datagen.grid import read_json

    try:
        report = read_json(report_path)
    except OSError as err:
        raise UserError(f"cannot read {report_path}: {err.strerror or err} (`costmodel "
                        "evaluate` writes report.json)") from None
    except ValueError as err:
        raise UserError(f"{report_path} is not JSON ({err})") from None
    out = out or os.path.join(os.path.dirname(report_path), "report.md")
    if os.path.dirname(out):
        output_folder(os.path.dirname(out))
    try:
        _save_markdown(report, out)
    except (KeyError, TypeError, IndexError, AttributeError):
        raise UserError(f"{report_path} is not a report of `costmodel evaluate` (it lacks "
                        "the models, split or workloads that one holds)") from None
    return out


def _save_markdown(report: dict, out: str) -> None:
    """Write `report`'s readable markdown to `out` atomically, naming the plots that are not
    beside it instead of linking them."""
    text = _markdown(report, tuple(p for p in report["plots"]
                                   if not os.path.exists(os.path.join(os.path.dirname(out), p))))
    with atomic_path(out) as tmp, open(tmp, "w") as f:
        f.write(text)


def choose_sides(meta: dict, frame: pd.DataFrame, split: str | None, test_fraction: float,
                 test_families: list[str] | None, test_networks: list[str] | None,
                 seed: int) -> tuple[str, dict]:
    """(split, sides) to evaluate on: the checkpoint's own, unless another split is asked for.

    Naming test families (networks) without a split means the family (network) split. The
    cross-suite split keeps the checkpoint's training and validation workloads and tests on
    every other workload of `frame` (the other suite's records). The all split of records of a
    target that trained nothing of the checkpoint (another CPU's) tests on every workload of
    them: the checkpoint zero-shot on that target.
    """
    if split == "all" and head_for(meta, frame.target.iloc[0]) is None:
        return split, {"train": [], "val": [],
                       "test": sorted(set(map(str, frame.workload_key)))}
    if split is None:
        split = "family" if test_families else "network" if test_networks else None
    if split == "cross-suite":
        seen = set(meta["sides"]["train"]) | set(meta["sides"]["val"])
        return split, {"train": meta["sides"]["train"], "val": meta["sides"]["val"],
                       "test": sorted(set(map(str, frame.workload_key)) - seen)}
    if split is None or (split == meta["split"] and not test_families and not test_networks):
        return meta["split"], meta["sides"]
    return split, split_workloads(frame, split, test_fraction, test_families or [], 0.0, seed,
                                  test_networks)


def _suites(meta: dict, dataset: str, train_dataset: str | None) -> tuple[str, str]:
    """(the records to score, the records the checkpoint trained on) of a cross-suite
    evaluation: `dataset` and `train_dataset` (default: the checkpoint's own dataset); a
    checkpoint of the cross-suite split scored on its own dataset is scored on the suite it
    was tested on."""
    train_dataset = train_dataset or meta["dataset"]
    if os.path.abspath(dataset) == os.path.abspath(train_dataset) and meta.get("test_dataset"):
        dataset = meta["test_dataset"]
    return dataset, train_dataset


def baseline_training(predictors: list, train: pd.DataFrame, own_sides: bool,
                      checkpoints: list[str], dataset: str) -> list[tuple[pd.DataFrame, list]]:
    """What each baseline trains on, as (records, seeds) pairs, a seed per checkpoint: the
    records of the training workloads, or, on a checkpoint's own split, what it trained on:
    the share of them it trained on (`records_trained_on`) and the records of its joint
    datasets (`joint_records_of`); one pair per checkpoint where these differ.

    Raises:
        UserError: a checkpoint's share cannot be drawn again from `dataset`, or its joint
            datasets' records changed since.
    """
    from costmodel.data_module import joint_records_of

    if not own_sides:
        return [(train, list(range(len(predictors))))]

    def trained(p, checkpoint: str) -> pd.DataFrame:
        frame = records_trained_on(train, p.meta, checkpoint, dataset)
        joint = joint_records_of(checkpoint, p.meta, dataset, "the baselines")
        return frame if joint is None else pd.concat([frame, joint], ignore_index=True)

    what = [json.dumps([p.meta.get("train_share") or {}, p.meta.get("joint") or []],
                       sort_keys=True) for p in predictors]
    if len(set(what)) == 1:
        return [(trained(predictors[0], checkpoints[0]), list(range(len(predictors))))]
    return [(trained(p, c), [i]) for i, (p, c) in enumerate(zip(predictors, checkpoints))]


HEADS = ("auto", "own", "mean")


def choose_head(head: str, predictor, target: str) -> int | str:
    """`--head` as `CostModelPredictor.use_head` takes it, for records of `target`: auto, the
    head that trained on that target's records, or for a target none trained on the mean of
    every head (a CPU's zero-shot ranking: chosen on CPU records no head trained on,
    bench/README.md "Cost model v3 on four CPUs"); own, the network's own (0); mean; or a
    head's number."""
    if head == "auto":
        return predictor.head_for_target(target)
    if head == "own":
        return 0
    if head == "mean":
        return head
    if not head.isdigit():
        raise UserError(f"--head {head}: choose {', '.join(HEADS)} or a head's number")
    return int(head)


def evaluate(checkpoints: list[str], dataset: str, out: str, split: str | None = None,
             test_fraction: float = 0.2, test_families: list[str] | None = None,
             seed: int = 0, baseline: bool = True, test_networks: list[str] | None = None,
             ensemble: bool = False, baselines: list[str] | None = None,
             cache_dir: str | None = None, blend: bool = True,
             train_dataset: str | None = None, head: str = "auto") -> dict:
    """Evaluate checkpoints (one per training seed, or all of them as one ensemble) and the
    baselines (`baselines`: names in `BASELINES`, default all; none if not `baseline`);
    write the report. With `cache_dir` (a `Featurizer` cache, as training fills), records
    featurised before are read from it rather than lowered again, and new ones are added.
    A checkpoint with a tree companion beside it is scored as the blend it predicts,
    unless not `blend`. The cross-suite split scores every workload of `dataset` that the
    checkpoint neither trained nor validated on, and the baselines train on its training
    workloads' records in `train_dataset` (default: the checkpoint's dataset): say the network
    tasks' model on the hand-written suite, or the reverse. A network with a head per target
    (`joint_head`) predicts with `head` (`choose_head`). Records of another target than the
    checkpoint's own are scored without the workloads its joint datasets hold
    (`leave_out_joint_workloads`), before any split.

    Raises:
        UserError: unreadable checkpoints, an unknown baseline, a cache or `out` folder that
            cannot be written, a dataset without usable records or with records of several
            targets or of another target kind than a checkpoint's (a CPU model on GPU
            records), a split that leaves a side empty, a checkpoint trained on a share of
            records that cannot be drawn again from `dataset` for the baselines.
    """
    from costmodel.predictor import CostModelPredictor
    from costmodel.baselines import BASELINES

    names = (list(BASELINES.names()) if baselines is None else list(baselines)) \
        if baseline else []
    for name in names:
        BASELINES.get(name)  # an unknown name fails before any work
    if cache_dir is not None:  # likewise a cache that cannot be written
        try:
            os.makedirs(cache_dir, exist_ok=True)
        except OSError as err:
            raise UserError(f"--cache-dir {cache_dir}: {err.strerror}; name a folder this user "
                            "can write, or leave the option out") from None
        if not os.access(cache_dir, os.W_OK | os.X_OK):
            raise UserError(f"--cache-dir {cache_dir}: not writable; name a folder this user "
                            "can write, or leave the option out")
    output_folder(out, create=False)  # and an --out that cannot be written
    predictors = [CostModelPredictor.load(checkpoints, cache_dir, blend=blend)] if ensemble \
        else [CostModelPredictor.load(c, cache_dir, blend=blend) for c in checkpoints]
    meta = predictors[0].meta
    if split is None and not test_families and not test_networks:
        split = meta["split"]
    if split == "cross-suite":
        dataset, train_dataset = _suites(meta, dataset, train_dataset)
    elif train_dataset is not None:
        raise UserError("--train-dataset names the records of the cross-suite split's training "
                        "side: add --split cross-suite, or leave it out")
    frame, dropped = usable(read_records(dataset, RECORD_COLUMNS))
    if frame.empty:
        raise UserError(f"{dataset} has no successfully measured records")
    check_one_target(frame, dataset)
    for p in predictors:
        p.use_head(choose_head(head, p, frame.target.iloc[0]))
    trained_elsewhere = 0  # workloads of these records the joint datasets hold
    if frame.target.iloc[0] != meta["target"]:
        frame, trained_elsewhere = leave_out_joint_workloads(frame, meta)
        if frame.empty:
            raise UserError(f"every workload of {dataset} trained the checkpoint in a joint "
                            "dataset (on another target): none is left to score it on")
    train_frame = frame
    if split == "cross-suite":
        train_frame, _ = usable(read_records(train_dataset, RECORD_COLUMNS))
        if train_frame.empty or train_frame.target.iloc[0] != frame.target.iloc[0]:
            raise UserError(f"{train_dataset} (the training side) and {dataset} (the suite "
                            "scored) must both hold usable records of one target")
    kind = json.loads(frame.target.iloc[0])["kind"]
    if other := next((m for p in predictors for m in p.members if m.target_kind != kind), None):
        raise UserError(f"{other.path} was trained for {other.target_kind} targets and "
                        f"{dataset} holds {kind} measurements: its featuriser would lower "
                        f"them for {other.target_kind}; evaluate a checkpoint trained on "
                        f"{kind} records, or adapt this one to them first (train fit "
                        "--model.init_from, bench/transfer.py)")
    split, sides = choose_sides(meta, frame, split, test_fraction, test_families, test_networks,
                                seed)
    seen = sorted(set(sides["test"]) & {k for p in predictors for m in p.members
                                         for k in m.meta["sides"]["train"] + m.meta["sides"]["val"]})
    if split in OUT_OF_DISTRIBUTION and seen:
        raise UserError(f"{len(seen)} of the {split} split's held-out workloads trained or "
                        f"validated a checkpoint (e.g. {seen[0]}): score a checkpoint trained on "
                        f"this split ('train fit ... --data.split {split}'), or one that never "
                        "saw these workloads")
    test = frame[frame.workload_key.isin(sides["test"])].reset_index(drop=True)
    train = train_frame[train_frame.workload_key.isin(sides["train"])].reset_index(drop=True)
    if test.empty and split == "all":
        raise UserError(f"{checkpoints[0]} was trained on every workload (split all) and has "
                        "none held out; evaluate it with --split shapes, family or network on "
                        "a dataset it did not train on, with --split all on another target's "
                        "records, or evaluate a checkpoint of that split")
    if test.empty or (train.empty and names):
        raise UserError(f"the {split} split leaves {'test' if test.empty else 'train'} empty "
                        f"in {dataset}" + ("" if test.empty else
                                           ": the baselines have nothing to train on; add "
                                           "--no-baseline to score the checkpoint alone"))
    own = sides == meta["sides"] or split == "cross-suite"
    fits = baseline_training(predictors, train, own, checkpoints,
                             train_dataset or dataset) if names else []
    os.makedirs(out, exist_ok=True)
    models, preds = {}, {}
    runs = []
    latency = all(p.predicts_latency for p in predictors)
    for p in predictors:
        pred = p.predict_records(test)
        preds.setdefault(GRAPHSAGE, pred)
        runs.append(grouped_metrics(test, pred, latency=latency))
    mean, std = _spread(runs)
    models[GRAPHSAGE] = {"runs": len(runs), "ensemble": ensemble, "predicts_latency": latency,
                         "mean": mean, "std": std, "per_run": runs,
                         "checkpoints": [os.path.basename(c) for c in checkpoints],
                         "head": [p.head for p in predictors],
                         "blended_with": [_blended_with(p.companion) for p in predictors]}
    target = make_target(json.loads(meta["target"]))
    for name in names:  # each baseline once per checkpoint seed
        runs = []
        for scores in (s for records, seeds in fits for s in BASELINES.get(name)(
                records, test, target, seeds, cache_dir=cache_dir)):
            preds.setdefault(name, -scores)  # higher score is faster: negate to order as latency
            runs.append(grouped_metrics(test, -scores, latency=False))
        mean, std = _spread(runs)
        models[name] = {"runs": len(runs), "predicts_latency": False, "mean": mean, "std": std,
                        "per_run": runs}
    test_fams = sorted(test.family.unique())
    report = {"split": split, "dataset": dataset, "dropped_records": dropped,
              **({"train_dataset": train_dataset} if split == "cross-suite" else {}),
              "test_families": test_fams,
              "test_networks": sorted(set().union(*(record_networks(n) for n in test.network))),
              "train_workloads": len(sides["train"]), "test_workloads": len(sides["test"]),
              "test_records": len(test), "left_out_joint_workloads": trained_elsewhere,
              "baseline_train_records": [len(records) for records, _ in fits], "models": models}
    report["plots"] = [os.path.basename(f) for f in _plots(test, preds, out, latency)]
    with open(os.path.join(out, "report.json"), "w") as f:
        json.dump(report, f, indent=2)
    _save_markdown(report, os.path.join(out, "report.md"))
    return report
