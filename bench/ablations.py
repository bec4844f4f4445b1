"""Benchmark: what each step of cost model v2 buys, scored on held-out networks (or on any
split of `costmodel.splits`, the out-of-distribution ones included: a base config whose
`data.split` is novel-shapes, unseen-family or cross-suite with its `test_dataset`).

Every variant trains with `train fit` (the base config, default configs/graphsage-networks.yaml,
plus the variant's settings) once per seed, keeps its checkpoint of best validation Kendall tau,
and is scored on the same held-out records: every workload that occurs only in the config's
`test_networks` (`costmodel.splits.split_workloads`). Variants (`VARIANTS`):

- base: MSE on log-latency plus the pairwise logistic rank loss, every label;
- clean: as base, trained only on labels whose repeats spread at most 5% (`--data.max_cv`);
- listmle / lambdarank: the listwise losses in place of the pairwise one;
- relative: targets standardised per workload (a relative score: no MAPE);
- stores: as base, the model also reads MetaSchedule's per-store features (TenSet's input, what
  the tree baselines see) beside the graph (`--model.views [store]`);
- stores_lambdarank: as stores, with LambdaRank in place of the pairwise loss;
- stores_regret: as stores, each rank pair weighted by its gap in normalised throughput
  (`costmodel.losses.regret_rank_loss`), so the fast end of each workload weighs most;
- stores_trace: as stores, plus a third view, the schedule's trace as tokens through
  self-attention (TLP's input: each primitive and its decisions; `--model.views [store,trace]`);
- stores_warps: as stores, plus each memory access's warp features beside its node features
  (`--model.views [store,warp]`: the bank conflict of a shared-memory access, the 32-byte
  sectors of a global one, for one warp's lanes; `costmodel.featurize.WARP_FEATURES`);
- narrow: trained on the first dataset (`data/llvm-full`, 52 hand-picked workloads, its own
  held-out-shapes split), scored on the same held-out networks: what the breadth bought.

`--try NAME model.KEY=VALUE data.KEY=VALUE ...` adds a variant of your own (a hyperparameter
to choose on validation), e.g. `--try wide model.hidden=256`.

A variant trained with several seeds is also scored as their ensemble (mean predicted
log-latency, `CostModelPredictor.load` of all of them). With `--hybrid BASELINE` each variant
(its ensemble) is also scored blended with that baseline, both standardised within each
workload: whether the two views of a program complement each other (an ablation only); the
blend is half and half, or `--hybrid-weight val` chooses it on the validation workloads. The
baselines (MetaSchedule's XGBModel, TenSet's LightGBM and MLP; `costmodel.baselines`) train once
on the base split's training records. Which variant wins is decided on the validation
workloads (the mean of the runs' best validation tau), never on the held-out networks: the
table shows both.

`--diagnose` says what limits the figures: the held-out labels' own ceiling (each record's
latency from one repeat, drawn at random, ranked by another: tau and top-1 of a perfect model of
the measurements), how much of the top-1 score its heaviest tasks carry (a ratio of weighted
sums: long tasks dominate), how well each variant's first seed fits records it trained on
(a seeded sample of training workloads) against the validation and held-out ones, and how well
each tree baseline fits the same training workloads: underfitting
or not, and on each side the tasks whose predicted-fastest schedule costs top-1 the most.

Writes summary.json (every run with its per-network metrics, per variant the mean and standard
deviation over seeds, the ensembles, the baselines, the variant chosen on validation). Each run
lives in --out/runs/VARIANT/seedS with its config, logs, checkpoint and result.json; finished
runs are read back, so an interrupted benchmark resumes (a run made with other settings, or
on another number of records, the dataset grown since, is refused: use another --out).

    python bench/ablations.py [--variants base clean listmle lambdarank relative stores narrow]
        [--seeds 0 1 2] [--max-epochs 30] [--baselines xgb lightgbm mlp] [--out bench/results/ablations]
        [--hybrid lightgbm [--hybrid-weight 0.5|val]] [--diagnose] [--summary summary.json]
"""

from __future__ import annotations

import argparse
import glob
import hashlib
import json
import math
import os
import shutil
import sys
import time

import numpy as np
import pandas as pd

from datagen.grid import Grid, portable, write_json

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CONFIG = os.path.join(REPO, "configs", "graphsage-networks.yaml")
# name -> (what it is, model settings, data settings) on top of the base config
VARIANTS = {
    "base": ("MSE + pairwise logistic rank loss, all labels", {}, {}),
    "clean": ("as base, only labels with repeat spread <= 5%", {}, {"max_cv": 0.05}),
    "listmle": ("MSE + listwise ListMLE", {"rank_loss": "listmle"}, {}),
    "lambdarank": ("MSE + LambdaRank", {"rank_loss": "lambdarank"}, {}),
    "relative": ("targets standardised per workload", {}, {"normalize_per_workload": True}),
    "stores": ("as base, plus per-store features beside the graph",
               {"views": ["store"]}, {}),
    "stores_lambdarank": ("as stores, with LambdaRank for the rank loss",
                          {"views": ["store"], "rank_loss": "lambdarank"}, {}),
    "stores_regret": ("as stores, with rank pairs weighted by their throughput gap",
                      {"views": ["store"], "rank_loss": "regret"}, {}),
    "stores_trace": ("as stores, plus the schedule's trace as tokens (TLP's view)",
                     {"views": ["store", "trace"]}, {}),
    "stores_warps": ("as stores, plus each access's warp features (bank conflicts, sectors)",
                     {"views": ["store", "warp"]}, {}),
    "narrow": ("as base, trained on data/llvm-full (52 workloads)", {},
               {"dataset": "data/llvm-full", "split": "shapes", "test_networks": None}),
}
METRICS = ("kendall_tau", "top1_score", "top5_score", "mape")
NAMES = {"kendall_tau": "tau", "top1_score": "top-1", "top5_score": "top-5", "mape": "MAPE"}


def add_tried(tried: list[list[str]] | None) -> list[str]:
    """Register each `--try NAME model.KEY=VALUE ...` as a variant; their names.

    Raises:
        UserError: a name already taken, or a setting not of the form model.KEY=VALUE or
            data.KEY=VALUE.
    """
    import yaml

    from datagen.errors import UserError

    names = []
    for name, *pairs in tried or []:
        if name in VARIANTS:
            raise UserError(f"--try {name}: that variant exists already; name yours otherwise")
        parts = {"model": {}, "data": {}}
        for pair in pairs:
            key, eq, value = pair.partition("=")
            section, dot, field = key.partition(".")
            if not eq or not dot or section not in parts or not field:
                raise UserError(f"--try {name}: {pair!r} is not model.KEY=VALUE or "
                                "data.KEY=VALUE")
            parts[section][field] = yaml.safe_load(value)
        VARIANTS[name] = ("tried: " + (", ".join(pairs) or "the base config"), parts["model"],
                          parts["data"])
        names.append(name)
    return names


def base_config(path: str) -> dict:
    import yaml

    with open(path) as f:
        return yaml.safe_load(f)


def run_config(args, variant: str, seed: int, work: str) -> dict:
    """The settings `train fit` reads after the base config for one run (its trainer:
    `training.cli.run_trainer`)."""
    from training.cli import run_trainer

    _, model, data = VARIANTS[variant]
    dataset = {"dataset": args.dataset} if args.dataset else {}
    return {"seed_everything": seed,
            "trainer": run_trainer(work, args.accelerator, args.max_epochs),
            "model": dict(model), "data": {"cache_dir": args.cache_dir, **dataset, **data}}


# settings a run records since a later version: one made before is read back without them
ADDED_SETTINGS = ("records",)


def settings(args, variant: str, held: "HeldOut") -> dict:
    """What a finished run must share with this invocation to be read back: also the number of
    records on each side, so a run made before its datasets grew is not read back as theirs."""
    return {"config": portable(args.config, REPO), "dataset": args.dataset,
            "max_epochs": args.max_epochs,
            "variant": [VARIANTS[variant][1], VARIANTS[variant][2]],
            "records": {"train": len(held.trees_train), "val": len(held.val),
                        "test": len(held.test)}}


def run_cell(variant: str, seed: int) -> str:
    """One run's result in --out (a cell of the benchmark's `Grid`), in the run's folder."""
    return os.path.join("runs", variant, f"seed{seed}", "result.json")


def train(args, variant: str, seed: int, work: str) -> tuple[str, float, float]:
    """`train fit` for one (variant, seed) in `work`: its best checkpoint, that checkpoint's
    validation tau and the wall-clock seconds of the whole run."""
    from datagen.errors import UserError

    shutil.rmtree(work, ignore_errors=True)  # a run that did not finish starts over
    os.makedirs(work)
    config = os.path.join(work, "run-config.json")
    write_json(config, run_config(args, variant, seed, work), indent=1)
    from training.cli import train_process

    start = time.monotonic()
    proc = train_process(["fit", "--config", args.config, "--config", config])
    seconds = time.monotonic() - start
    with open(os.path.join(work, "train.log"), "w") as f:
        f.write(proc.stdout + proc.stderr)
    if proc.returncode != 0:
        last = (proc.stderr.strip().splitlines() or ["(no output)"])[-1]
        raise UserError(f"training {variant} seed {seed} failed: {last} (log: {work}/train.log)")
    found = glob.glob(os.path.join(work, "checkpoints", "*.ckpt"))
    logs = glob.glob(os.path.join(work, "logs", "*", "metrics.csv"))
    if len(found) != 1 or len(logs) != 1:
        raise UserError(f"training {variant} seed {seed} left {len(found)} checkpoints and "
                        f"{len(logs)} logs in {work}, expected 1 of each")
    val = pd.read_csv(logs[0])["val/kendall_tau"].max()
    return found[0], float(val), seconds


class HeldOut:
    """The held-out networks' records (and the training side, for the baselines)."""

    def __init__(self, args):
        from datagen.records import read_records
        from costmodel.splits import (RECORD_COLUMNS, check_one_target, split_workloads, usable,
                                   with_test_dataset)

        data = base_config(args.config)["data"]
        self.dataset = args.dataset or data["dataset"]
        frame, _ = usable(read_records(self.dataset, RECORD_COLUMNS))
        check_one_target(frame, self.dataset)
        if data.get("split") == "cross-suite":  # the other suite's records are the test side
            frame = with_test_dataset(frame, data["test_dataset"], self.dataset)
        self.sides = split_workloads(frame, data.get("split", "network"),
                                     data.get("test_fraction", 0.2),
                                     data.get("test_families") or [],
                                     data.get("val_fraction", 0.1), data.get("seed", 0),
                                     data.get("test_networks"))
        self.test = frame[frame.workload_key.isin(self.sides["test"])].reset_index(drop=True)
        self.val = frame[frame.workload_key.isin(self.sides["val"])].reset_index(drop=True)
        self.train = frame[frame.workload_key.isin(self.sides["train"])].reset_index(drop=True)
        self.trees_train = self.train  # what the baselines fit: the network's training records
        if data.get("joint_dataset"):  # the other datasets that train beside them, too
            from costmodel.data_module import joint_records

            joint = joint_records(data["joint_dataset"], data.get("joint_share", 1.0),
                                  data.get("seed", 0), frame.target.iloc[0],
                                  pd.concat([self.val, self.test], ignore_index=True),
                                  self.dataset, data.get("split", "network"))[0]
            self.trees_train = pd.concat([self.train, joint.drop(columns=["head", "dataset"])],
                                         ignore_index=True)
        self.cache_dir = args.cache_dir
        self.predicted = {}  # (checkpoints, side) -> our log-latency predictions
        self.device = "cuda" if args.accelerator == "gpu" else "cpu"

    def predictor(self, checkpoints: list[str]):
        """One checkpoint, or several as an ensemble: the networks alone (`--hybrid` blends)."""
        from costmodel.predictor import CostModelPredictor

        return CostModelPredictor.load(checkpoints if len(checkpoints) > 1 else checkpoints[0],
                                       cache_dir=self.cache_dir, device=self.device, blend=False)

    def score(self, checkpoints: list[str]) -> dict:
        """Overall and per-network metrics of one checkpoint, or several as an ensemble."""
        from costmodel.evaluate import score

        found = score(self.predictor(checkpoints), self.test)
        return {"overall": found["overall"], "per_network": found["per_network"],
                "per_family": found["per_family"]}

    def hybrid(self, checkpoints: list[str], other, weight: float = 0.5,
               side: str = "test") -> dict:
        """Metrics on one side ("test" or "val") of the checkpoints' (ensemble's) predictions
        blended with another model's scores of that side (lower is faster), each standardised
        within its workload first: `weight` of ours, 1 - `weight` of the other's (the blend
        `costmodel blend` ships, `costmodel.blend.blend`)."""
        from costmodel.blend import blend
        from costmodel.evaluate import grouped_metrics

        frame = getattr(self, side)
        keys = frame.workload_key
        if (tuple(checkpoints), side) not in self.predicted:  # a weight curve predicts once
            self.predicted[tuple(checkpoints), side] = np.log(
                self.predictor(checkpoints).predict_records(frame))
        ours = self.predicted[tuple(checkpoints), side]
        both = blend(ours, -np.asarray(other), keys.to_numpy(), weight)
        found = grouped_metrics(frame, both, latency=False)
        return {"overall": found["overall"], "per_network": found["per_network"],
                "per_family": found["per_family"]}

    def check(self, meta: dict, variant: str) -> None:
        """Refuse a checkpoint that trained on held-out workloads.

        Raises:
            UserError: it did (its split differs from this one).
        """
        from datagen.errors import UserError

        seen = set(self.sides["test"]) & (set(meta["sides"]["train"]) | set(meta["sides"]["val"]))
        if seen:
            raise UserError(f"{variant} trained on {len(seen)} held-out workloads; its split "
                            "differs from the base config's")


def spread(rows: list[dict]) -> dict:
    """Per metric: mean and standard deviation over rows where it is defined."""
    out = {}
    for metric in rows[0]:
        vals = [r[metric] for r in rows if r[metric] is not None and math.isfinite(r[metric])]
        out[metric] = {"mean": float(np.mean(vals)), "std": float(np.std(vals)),
                       "n": len(vals)} if vals else None
    return out


SIDES = ("test", "val", "fit")  # what a baseline scores: held out, validation, `fit_sample`


def baseline_scores(args, held: HeldOut, name: str, side: str = "test") -> np.ndarray:
    """A tree baseline's predictions of one side's records ("test", "val", or "fit": the
    `fit_sample` of the records it trained on; lower is faster), trained on the base split's
    training records and kept in --out/baselines/NAME-scores.npz (the test side) or
    NAME-SIDE-scores.npz (arrays only). One fit scores every side this run reads that is not
    kept yet (the test side, the validation side with --hybrid-weight val, the fit sample with
    --diagnose)."""
    from datagen.tvm_env import make_target
    from costmodel.baselines import BASELINES

    wanted = [s for s in SIDES if s in ("test", side) or (
        s == "val" and args.hybrid == name and args.hybrid_weight == "val" and len(held.val))
              or (s == "fit" and args.diagnose)]
    frames = {s: fit_sample(held) if s == "fit" else getattr(held, s) for s in wanted}

    def kept_at(s):
        return os.path.join(args.out, "baselines",
                            f"{name}-scores.npz" if s == "test" else f"{name}-{s}-scores.npz")

    def digest(frame):  # the side's records, in order
        return hashlib.sha1("\n".join(frame.workload_key + "/" + frame.trace_hash).encode()
                            ).hexdigest()

    def kept(s):
        if os.path.isfile(kept_at(s)):
            with np.load(kept_at(s), allow_pickle=False) as f:
                if str(f["records"]) == digest(frames[s]) and \
                        int(f["train"]) == len(held.trees_train):
                    return f["scores"]
        return None

    found = {s: kept(s) for s in wanted}
    if found[side] is not None:
        return found[side]
    todo = [s for s in wanted if found[s] is None]
    print(f"baseline {name} on the {', '.join(todo)} records ...", flush=True)
    both = pd.concat([frames[s] for s in todo], ignore_index=True)
    target = make_target(json.loads(both.target.iloc[0]))
    scores = -next(iter(BASELINES.get(name)(held.trees_train, both, target, [0],
                                            cache_dir=held.cache_dir)))
    os.makedirs(os.path.join(args.out, "baselines"), exist_ok=True)
    for s, part in zip(todo, np.split(scores, np.cumsum([len(frames[s]) for s in todo])[:-1])):
        np.savez(kept_at(s), scores=part, records=digest(frames[s]),
                 train=len(held.trees_train))
        found[s] = part
    return found[side]


# blend weights of our model tried on the validation workloads (`--hybrid-weight val`)
WEIGHTS = tuple(i / 10 for i in range(11))


def hybrid_weight(args, held: HeldOut, members: list[str]) -> tuple[float, dict]:
    """The blend weight of our model (the rest is the baseline's) with the best top-1 score on
    the validation workloads (ties: the better tau, then the weight nearer 1/2), and every
    weight's validation top-1 and tau. Both models score the validation records out of their
    training data (the checkpoints only chose their epoch on them)."""
    from datagen.errors import UserError

    if held.val.empty:
        raise UserError("--hybrid-weight val needs validation workloads; the base config has "
                        "none (set data.val_fraction above 0)")
    other = baseline_scores(args, held, args.hybrid, side="val")
    curve = {w: held.hybrid(members, other, w, side="val")["overall"] for w in WEIGHTS}
    best = max(WEIGHTS, key=lambda w: (curve[w]["top1_score"], curve[w]["kendall_tau"],
                                       -abs(w - 0.5)))
    return best, {f"{w:.1f}": {m: curve[w][m] for m in ("top1_score", "kendall_tau")}
                  for w in WEIGHTS}


# --diagnose: draws of one repeat against another; training workloads whose fit is scored
CEILING_DRAWS = 5
FIT_WORKLOADS = 120
WORST_PICKS = 3


def label_ceiling(frame: pd.DataFrame, seed: int = 0) -> dict:
    """Kendall tau and top-1 of one repeat of each record ranked by another (both drawn at
    random from its repeats; mean of `CEILING_DRAWS` draws): what a model that knew every
    program's true latency would score against labels as noisy as these."""
    from costmodel.metrics import kendall_tau, top_k_score

    rng = np.random.default_rng(seed)
    repeats = [np.asarray(r, float).ravel() for r in frame.latencies]
    taus, tops = [], []
    for _ in range(CEILING_DRAWS):
        a = np.array([rng.choice(r) for r in repeats])
        b = np.array([rng.choice(r) for r in repeats])
        taus.append(kendall_tau(frame.workload_key, a, b))
        tops.append(top_k_score(frame.workload_key, a, b, 1, frame.workload_weight))
    return {"kendall_tau": float(np.mean(taus)), "top1_score": float(np.mean(tops)),
            "draws": CEILING_DRAWS}


def top1_weight(frame: pd.DataFrame) -> dict:
    """How the top-1 score's weight (each task's w_t times its best latency) spreads over the
    tasks: the share of the heaviest 10 and how many of the heaviest hold half."""
    tasks = frame.groupby("workload_key").agg(best=("latency_median", "min"),
                                              w=("workload_weight", "first"))
    share = np.sort((tasks.best * tasks.w / (tasks.best * tasks.w).sum()).to_numpy())[::-1]
    return {"tasks": len(share), "heaviest_10_share": float(share[:10].sum()),
            "tasks_holding_half": int(np.searchsorted(np.cumsum(share), 0.5) + 1)}


def worst_picks(frame: pd.DataFrame, predicted: np.ndarray, n: int = WORST_PICKS) -> list[dict]:
    """The `n` tasks whose predicted-fastest schedule costs top-1 the most (its weight times
    the latency it adds over the task's fastest measured one): what a low top-1 is made of."""
    found = frame.assign(predicted=np.asarray(predicted))
    rows = []
    for key, task in found.groupby("workload_key"):
        best = task.latency_median.min()
        picked = task.latency_median[task.predicted.idxmin()]  # lower predicts faster
        rows.append({"workload": key, "weight": float(task.workload_weight.iloc[0]),
                     "best_us": best * 1e6, "picked_us": picked * 1e6,
                     "faster_than_pick": int((task.latency_median < picked).sum()),
                     "records": len(task),
                     "cost": float(task.workload_weight.iloc[0] * (picked - best))})
    return sorted(rows, key=lambda r: -r["cost"])[:n]


def fit_sample(held: HeldOut, seed: int = 0) -> pd.DataFrame:
    """The records of a seeded sample of `FIT_WORKLOADS` training workloads."""
    keys = sorted(held.train.workload_key.unique())
    keys = np.random.default_rng(seed).choice(keys, min(FIT_WORKLOADS, len(keys)), replace=False)
    return held.train[held.train.workload_key.isin(keys)].reset_index(drop=True)


def fit(held: HeldOut, checkpoint_path: str, seed: int = 0) -> dict:
    """Overall metrics of one checkpoint on `fit_sample`'s training workloads (records it
    trained on), on the validation ones (it only chose its epoch there) and on the held-out
    ones, each side with its `worst_picks`."""
    from costmodel.evaluate import grouped_metrics

    sides = {"train": fit_sample(held, seed), "val": held.val, "test": held.test}
    predictor = held.predictor([checkpoint_path])
    out = {}
    for side, frame in sides.items():
        if len(frame):
            predicted = predictor.predict_records(frame)
            out[side] = {"records": len(frame), **grouped_metrics(
                frame, predicted, predictor.predicts_latency)["overall"],
                "worst_picks": worst_picks(frame, predicted)}
    return out


def diagnose(args, held: HeldOut, variants: dict) -> dict:
    """`--diagnose`: the labels' ceiling, top-1's weight, each variant's fit (first seed) and
    each baseline's on the same training workloads."""
    from costmodel.evaluate import grouped_metrics

    out = {"label_ceiling": label_ceiling(held.test), "top1_weight": top1_weight(held.test),
           "fit": {}}
    print(f"  held-out labels, one repeat against another: tau "
          f"{out['label_ceiling']['kendall_tau']:.3f}, top-1 "
          f"{out['label_ceiling']['top1_score']:.3f}; the heaviest 10 of "
          f"{out['top1_weight']['tasks']} tasks carry {out['top1_weight']['heaviest_10_share']:.0%}"
          f" of top-1, {out['top1_weight']['tasks_holding_half']} hold half", flush=True)
    sample = fit_sample(held)
    for name in args.baselines:  # do the trees fit the records they trained on better?
        found = out["fit"][name] = {"train": {"records": len(sample), **grouped_metrics(
            sample, baseline_scores(args, held, name, side="fit"), latency=False)["overall"]}}
        print(f"  {name} fits train tau {found['train']['kendall_tau']:.3f}, top-1 "
              f"{found['train']['top1_score']:.3f}", flush=True)
    for variant, row in variants.items():
        found = out["fit"][variant] = fit(held, os.path.join(args.out, row["first_checkpoint"]))
        print(f"  {variant} seed {args.seeds[0]} fits " + "; ".join(
            f"{side} tau {m['kendall_tau']:.3f}, top-1 {m['top1_score']:.3f}"
            for side, m in found.items()), flush=True)
        for side, m in found.items():
            print(f"    {side}, its costliest top-1 picks: " + "; ".join(
                f"{r['workload']} (weight {r['weight']:g}) {r['picked_us']:.1f} us against "
                f"{r['best_us']:.1f}, {r['faster_than_pick']} of {r['records']} faster"
                for r in m["worst_picks"]), flush=True)
    return out


def baseline(args, held: HeldOut, name: str) -> dict:
    """A tree baseline trained on the base split's training records, scored once (cached)."""
    from costmodel.evaluate import grouped_metrics

    grid, kept = Grid(args.out), os.path.join("baselines", f"{name}.json")
    wanted = {"config": portable(args.config, REPO), "dataset": held.dataset,
              "test": len(held.test),
              "train": len(held.trees_train)}
    if (found := grid.read(kept, wanted)) is not None:
        return found
    found = grouped_metrics(held.test, baseline_scores(args, held, name), latency=False)
    return grid.write(kept, {"settings": wanted, "overall": found["overall"],
                             "per_network": found["per_network"],
                             "per_family": found["per_family"]})


def cell(value: dict | float | None) -> str:
    if value is None:
        return f"{'n/a':>13}"
    if isinstance(value, dict):
        return f"{value['mean']:.3f} ± {value['std']:.3f}"
    return f"{value:>13.3f}"


def format_table(summary: dict) -> str:
    head = f"{'variant':<22} {'val tau':>13} " + " ".join(f"{NAMES[m]:>13}" for m in METRICS)
    lines = [head]
    for name, row in summary["variants"].items():
        lines.append(f"{name:<22} {cell(row['val_kendall_tau'])} "
                     + " ".join(cell(row["test"][m]) for m in METRICS))
        if row.get("ensemble"):
            lines.append(f"{name + ' ensemble':<22} {'':>13} "
                         + " ".join(cell(row["ensemble"]["overall"][m]) for m in METRICS))
        if row.get("hybrid"):
            label = (f"{name}{' ensemble' if row.get('ensemble') else ''} + "
                     f"{row['hybrid']['with']} ({row['hybrid'].get('weight', 0.5):.1f})")
            lines.append(f"{label:<22} {'':>13} "
                         + " ".join(cell(row["hybrid"]["overall"][m]) for m in METRICS))
    for name, row in summary["baselines"].items():
        lines.append(f"{name:<22} {'':>13} " + " ".join(cell(row["overall"][m]) for m in METRICS))
    lines.append(f"chosen on validation: {summary['chosen_on_validation']}  (mean ± std over "
                 "seeds; MAPE n/a: the model predicts no latency)")
    return "\n".join(lines)


def bench(args) -> int:
    from costmodel import checkpoint
    from datagen.errors import UserError, output_folder

    args.variants = list(dict.fromkeys(args.variants + add_tried(args.tried)))
    unknown = sorted(set(args.variants) - set(VARIANTS))
    if unknown:
        raise UserError(f"unknown variant {unknown[0]!r}; choose from {', '.join(VARIANTS)}")
    if args.hybrid_weight is not None and not args.hybrid:
        raise UserError("--hybrid-weight blends with a baseline: name it with --hybrid")
    held = HeldOut(args)
    output_folder(args.out)
    grid = Grid(args.out)
    # every finished run first: one made with other settings is refused before any training
    found = {(variant, seed): grid.read(run_cell(variant, seed), settings(args, variant, held),
                                        added=ADDED_SETTINGS)
             for variant in args.variants for seed in args.seeds}
    runs, variants = [], {}
    for variant in args.variants:
        wanted = settings(args, variant, held)
        mine = []
        for seed in args.seeds:
            work = os.path.dirname(grid.path(run_cell(variant, seed)))
            result = found[variant, seed]
            if result is None:
                print(f"training {variant}, seed {seed} ...", flush=True)
                ckpt, val, seconds = train(args, variant, seed, work)
                meta = checkpoint.read(ckpt)[checkpoint.META_KEY]
                held.check(meta, variant)
                result = grid.write(run_cell(variant, seed), {
                    "variant": variant, "seed": seed, "settings": wanted,
                    "checkpoint": os.path.relpath(ckpt, args.out),
                    "train_records": meta["train_share"]["records"],
                    "val_kendall_tau": val, "train_seconds": seconds, **held.score([ckpt])})
            else:
                print(f"read back {variant}, seed {seed}", flush=True)
            print(f"  {variant} seed {seed}: val tau {result['val_kendall_tau']:.3f}, held-out "
                  + ", ".join(f"{NAMES[m]} {cell(result['overall'][m]).strip()}"
                              for m in METRICS), flush=True)
            mine.append(result)
        runs += mine
        row = {"what": VARIANTS[variant][0],
               "val_kendall_tau": spread([{"v": r["val_kendall_tau"]} for r in mine])["v"],
               "test": spread([r["overall"] for r in mine]),
               "train_seconds": spread([{"s": r["train_seconds"]} for r in mine])["s"]}
        row["first_checkpoint"] = mine[0]["checkpoint"]
        members = [os.path.join(args.out, r["checkpoint"]) for r in mine]
        if len(mine) > 1:
            row["ensemble"] = held.score(members)
        if args.hybrid:
            row["hybrid"] = {"with": args.hybrid}
            weight = 0.5 if args.hybrid_weight is None else args.hybrid_weight
            if weight == "val":
                weight, row["hybrid"]["val_curve"] = hybrid_weight(args, held, members)
                print(f"  {variant}: weight {weight:.1f} chosen on validation (top-1, tau by "
                      "weight of ours: " + ", ".join(
                          f"{w} {c['top1_score']:.3f}/{c['kendall_tau']:.3f}"
                          for w, c in row["hybrid"]["val_curve"].items()) + ")", flush=True)
            row["hybrid"].update(weight=weight, **held.hybrid(
                members, baseline_scores(args, held, args.hybrid), weight))
        variants[variant] = row
    if not runs:
        raise UserError("no runs: give --variants and --seeds")
    chosen = max(variants, key=lambda v: variants[v]["val_kendall_tau"]["mean"])
    summary = {"config": portable(args.config, REPO), "dataset": held.dataset,
               "test_workloads": len(held.sides["test"]), "test_records": len(held.test),
               "train_workloads": len(held.sides["train"]), "seeds": args.seeds,
               "max_epochs": args.max_epochs, "variants": variants,
               "baselines": {name: baseline(args, held, name) for name in args.baselines},
               "chosen_on_validation": chosen, "runs": runs}
    if args.diagnose:
        summary["diagnosis"] = diagnose(args, held, variants)
    write_json(os.path.join(args.out, args.summary), summary, indent=1)
    print(f"== ablations on {held.dataset}: {summary['test_workloads']} held-out workloads, "
          f"{summary['test_records']} records; seeds {args.seeds}, at most {args.max_epochs} "
          "epochs ==")
    print(format_table(summary))
    print(f"{args.summary} in {args.out}")
    return 0


def weight_arg(text: str) -> float | str:
    """`--hybrid-weight`: a number in [0, 1] or "val"."""
    if text == "val":
        return text
    try:
        weight = float(text)
    except ValueError:
        weight = math.nan
    if not 0 <= weight <= 1:
        raise argparse.ArgumentTypeError(f"{text!r} is neither a weight in [0, 1] nor 'val'")
    return weight


def main(argv: list[str] | None = None) -> int:
    from datagen.errors import run_command

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=list(VARIANTS), help=", ".join(VARIANTS))
    parser.add_argument("--dataset", help="train and score on this dataset instead of the base "
                        "config's (e.g. a frozen copy while the collection grows)")
    parser.add_argument("--try", dest="tried", nargs="+", action="append",
                        metavar="NAME model.KEY=VALUE", help="a variant of your own")
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--max-epochs", type=int, default=30)
    parser.add_argument("--baselines", nargs="*", default=["xgb", "lightgbm", "mlp"])
    parser.add_argument("--hybrid", choices=["xgb", "lightgbm", "mlp"],
                        help="also score each variant (its seed ensemble) averaged with this "
                        "baseline, both standardised within each workload: an ablation, not "
                        "a predictor `tune` uses")
    parser.add_argument("--hybrid-weight", type=weight_arg, metavar="W|val",
                        help="weight of our model in the --hybrid blend (the rest is the "
                        "baseline's), or 'val': the weight with the best top-1 on the "
                        "validation workloads, among 0, 0.1, ..., 1 (default 0.5)")
    parser.add_argument("--diagnose", action="store_true",
                        help="also say what limits the figures: the held-out labels' noise "
                        "ceiling, top-1's heaviest tasks, each variant's fit on its own "
                        "training records")
    parser.add_argument("--accelerator", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--config", default=CONFIG, help="base `train fit` config")
    parser.add_argument("--cache-dir", default=".cache/features")
    parser.add_argument("--out", default="bench/results/ablations")
    parser.add_argument("--summary", default="summary.json",
                        help="the summary's file name in --out: invocations over the same runs "
                        "(one variant with three seeds, every variant with one) keep their own")
    args = parser.parse_args(argv)
    return run_command("ablations", bench, args)


if __name__ == "__main__":
    sys.exit(main())
