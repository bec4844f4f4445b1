"""Benchmark: the blend of a checkpoint with its tree companions, chosen out of distribution.

A checkpoint blends with its tree companions at a weight (`costmodel blend`,
`costmodel.blend`): the network's share of the standardised blend, the rest the trees' (its
pretrained XGBModel's alone, or, with several, each one's share). The weights are chosen on
validation workloads of out-of-distribution splits, never on workloads like the training
tasks, and never on the workloads they are then reported on:

- cross-suite: the workloads of other suites (`--dataset`, one or more: say the hand-written
  `full` suite and the unseen families beside the network tasks the checkpoint trained on),
  each split at random (`--seed`) into a validation half and a test half; the checkpoint and
  its companions score both;
- the validation curves of `bench/ablations.py --hybrid xgb --hybrid-weight val` runs
  (`--ablation DIR`: their summary.json), say the novel-shapes split, whose validation
  workloads share no buffer shape with any training workload (XGBModel alone).

The blend chosen is the one whose worst validation top-1 over the sources is highest (ties:
the higher mean validation Kendall tau, then the network's share nearer 1/2): a blend that
gives the first pick away on any kind of unseen kernel loses. With one tree model the
network's share is tried in tenths; with several (`--with xgb mlp`) every split of the
blend into tenths. Prints every blend's figures on each side and writes summary.json (one
scoring pass of minutes: a stopped run leaves no partial file and is run again); `costmodel
blend CHECKPOINT --with ... --weight W [--shares ...]` ships the choice.

    python bench/blend_weight.py --checkpoint checkpoints/graphsage-v3.ckpt --with xgb mlp \\
        --dataset data/llvm-full data/llvm-unseen-families \\
        --out bench/results/ood/blend-weight-v3-ens2-xgb-mlp

Where an ablation run tried several variants, `--variant NAME` reads the checkpoint's own.
"""

from __future__ import annotations

import argparse
import itertools
import os
import sys

import numpy as np

WEIGHTS = tuple(i / 10 for i in range(11))
METRICS = ("kendall_tau", "top1_score", "top5_score", "apeak32")


def blends(trees: int) -> dict[str, tuple[float, ...]]:
    """The blends tried, by key: the network's share and each tree model's, in tenths, adding
    up to 1; keyed by the network's share alone ("0.3") with one tree model, else by every
    share ("0.1/0.5/0.4")."""
    if trees == 1:
        return {f"{w:.1f}": (w, 1 - w) for w in WEIGHTS}
    splits = [c for c in itertools.product(range(11), repeat=trees + 1) if sum(c) == 10]
    return {"/".join(f"{x / 10:.1f}" for x in c): tuple(x / 10 for x in c)
            for c in sorted(splits, reverse=True)}


def metrics(part, predicted: np.ndarray) -> dict:
    """The figures a blend is chosen and reported on, over `part`'s workloads."""
    from costmodel.metrics import APEAK_K, apeak_at_k, kendall_tau, top_k_score

    args = (part.workload_key, part.latency_median, predicted)
    return {"kendall_tau": kendall_tau(*args),
            "top1_score": top_k_score(*args, 1, part.workload_weight),
            "top5_score": top_k_score(*args, 5, part.workload_weight),
            f"apeak{APEAK_K}": apeak_at_k(*args)}


def companion_of(args):
    """The checkpoint's network alone and its `--with` tree models as one companion (each
    loaded from its file beside the checkpoint)."""
    from costmodel import companions
    from costmodel.blend import SUFFIXES, Companion
    from costmodel.predictor import CostModelPredictor
    from datagen.errors import UserError

    alone = CostModelPredictor.load(args.checkpoint, cache_dir=args.cache_dir, blend=False)
    parts = []
    for name in args.with_:
        path = companions.beside(args.checkpoint, SUFFIXES[name])
        if not os.path.isfile(path):
            raise UserError(f"{path} is missing: the checkpoint's {name} model is what it "
                            f"blends with (fit it with `costmodel blend CHECKPOINT --with "
                            f"{name}`)")
        parts.append(Companion.load(path, alone.meta, args.checkpoint, weight=0.5))
    companion = Companion([c.model for c in parts], 0.5, [c.path for c in parts])
    return alone, companion


def cross_suite_curves(args, dataset: str, alone, companion) -> tuple[dict, dict]:
    """Per side ("val", "test") of `dataset`'s workloads, per blend (`blends`), the blend's
    metrics; and what the sides hold."""
    from costmodel.blend import blend
    from costmodel.predictor import CostModelPredictor
    from datagen.errors import UserError
    from datagen.records import read_records
    from costmodel.splits import RECORD_COLUMNS, check_one_target, usable

    both = CostModelPredictor(alone.members, args.cache_dir, companion)
    frame, _ = usable(read_records(dataset, RECORD_COLUMNS))
    if frame.empty:
        raise UserError(f"{dataset} has no successfully measured records")
    check_one_target(frame, dataset)
    trained = set(alone.meta["sides"]["train"]) | set(alone.meta["sides"]["val"])
    frame = frame[~frame.workload_key.isin(trained)].reset_index(drop=True)
    keys = sorted(frame.workload_key.unique())
    if len(keys) < 2:
        raise UserError(f"{dataset} has {len(keys)} workload(s) the checkpoint did not "
                        "train on: the cross-suite sides need two at least")
    val = set(np.random.default_rng(args.seed).choice(keys, len(keys) // 2, replace=False))
    graphs = list(both.featurizer.iter_records(
        zip(frame.workload_ir, frame.trace, frame.trace_hash)))
    log_seconds, throughput, _ = both.predict_parts(graphs)
    throughput = throughput.reshape(len(log_seconds), -1)
    groups = frame.workload_key.to_numpy()
    curves, sides = {}, {}
    for side, mask in (("val", frame.workload_key.isin(val).to_numpy()),
                       ("test", ~frame.workload_key.isin(val).to_numpy())):
        part = frame[mask].reset_index(drop=True)
        sides[side] = {"workloads": int(part.workload_key.nunique()), "records": len(part)}
        curves[side] = {}
        for key, (w, *shares) in blends(throughput.shape[1]).items():
            mixed = blend(log_seconds[mask], throughput[mask], groups[mask], w, shares)
            curves[side][key] = metrics(part, mixed)
    return curves, sides


def ablation_curves(path: str, variant: str | None = None) -> dict:
    """The validation curves (top-1, tau per weight) of an ablation run's hybrid blends with
    XGBModel, per variant (only `variant`'s when given: the checkpoint's own, where one run
    tried several)."""
    from datagen.errors import UserError
    from datagen.grid import read_json

    plain = os.path.join(path, "summary.json")  # a fresh run's, else the packed one kept
    try:
        summary = read_json(plain if os.path.exists(plain) else plain + ".xz")
    except (OSError, ValueError) as err:
        raise UserError(f"--ablation {path}: no readable summary.json ({err})") from None
    found = {name: row["hybrid"]["val_curve"] for name, row in summary["variants"].items()
             if row.get("hybrid", {}).get("with") == "xgb" and "val_curve" in row["hybrid"]}
    if not found:
        raise UserError(f"--ablation {path}: no variant blended with xgb on its validation "
                        "workloads (run bench/ablations.py --hybrid xgb --hybrid-weight val)")
    if variant is not None:
        if variant not in found:
            raise UserError(f"--ablation {path}: no variant {variant!r} blended with xgb "
                            f"(it has {', '.join(sorted(found))})")
        return {variant: found[variant]}
    if len(found) > 1:
        raise UserError(f"--ablation {path} tried {len(found)} variants "
                        f"({', '.join(sorted(found))}); name the checkpoint's with --variant")
    return found


def choose(sources: dict[str, dict]) -> str:
    """The blend (a key of the curves) whose worst validation top-1 over `sources` (name ->
    blend -> metrics) is highest; ties: the higher mean validation tau, then the network's
    share nearer 1/2."""
    def key(k):
        cells = [curve[k] for curve in sources.values()]
        return (min(c["top1_score"] for c in cells),
                float(np.mean([c["kendall_tau"] for c in cells])),
                -abs(float(k.split("/")[0]) - 0.5))
    return max(next(iter(sources.values())), key=key)


def main() -> int:
    from datagen.errors import output_folder, run_command
    from datagen.grid import write_json

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--with", dest="with_", nargs="+", default=["xgb"], metavar="MODEL",
                        help="its tree companions to blend with, each beside it (xgb, "
                        "lightgbm, mlp) [xgb]")
    parser.add_argument("--dataset", nargs="+", required=True,
                        help="other suites' records (cross-suite): each split into validation "
                        "and test halves")
    parser.add_argument("--ablation", nargs="*", default=[], metavar="DIR",
                        help="bench/ablations.py outputs whose xgb blends' validation curves "
                        "also choose (with --with xgb alone)")
    parser.add_argument("--variant", help="the checkpoint's variant in each --ablation "
                        "summary (needed where a run tried several)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the cross-suite halves")
    parser.add_argument("--cache-dir", default=".cache/features")
    parser.add_argument("--out", default="bench/results/ood/blend-weight")
    args = parser.parse_args()

    def run(args) -> int:
        from costmodel.blend import SUFFIXES
        from datagen.errors import UserError

        if unknown := [m for m in args.with_ if m not in SUFFIXES]:
            raise UserError(f"--with {unknown[0]}: no such companion; choose from "
                            f"{', '.join(SUFFIXES)}")
        if args.ablation and args.with_ != ["xgb"]:
            raise UserError("--ablation curves are of XGBModel blends; give them with "
                            "--with xgb alone")
        output_folder(args.out, create=False)
        sources = {}
        for path in args.ablation:
            for name, curve in ablation_curves(path, args.variant).items():
                sources[f"{os.path.basename(os.path.normpath(path))}/{name}"] = curve
        alone, companion = companion_of(args)
        tests, all_sides = {}, {}
        for dataset in args.dataset:
            curves, sides = cross_suite_curves(args, dataset, alone, companion)
            name = "cross-suite" if len(args.dataset) == 1 \
                else f"cross-suite/{os.path.basename(os.path.normpath(dataset))}"
            sources[name], tests[name], all_sides[name] = curves["val"], curves["test"], sides
        chosen = choose(sources)
        weight, *shares = blends(len(args.with_))[chosen]
        trees = " ".join(args.with_)
        print(f"== blend of {os.path.basename(args.checkpoint)} with {trees}: the network's "
              f"share{'' if len(shares) == 1 else ', then each tree model' + chr(39) + 's'} ==")
        for name, sides in all_sides.items():
            print(f"{name}: validation {sides['val']['workloads']} workloads, test "
                  f"{sides['test']['workloads']} (seed {args.seed})")
        print(f"{'blend':>15}  " + "  ".join(f"{name[:34]:>34}" for name in sources)
              + "  " + "  ".join(f"{'test ' + name[:29]:>34}" for name in tests))
        for k in blends(len(args.with_)):
            cells = [sources[name][k] for name in sources]
            print(f"{k:>15}  " + "  ".join(
                f"{'top-1 %.3f tau %.3f' % (c['top1_score'], c['kendall_tau']):>34}"
                for c in cells) + "  " + "  ".join(
                f"{' / '.join(f'{t[k][m]:.3f}' for m in METRICS):>34}" for t in tests.values())
                + ("   <- chosen" if k == chosen else ""))
        ship = f"--with {trees} --weight {weight:.1f}" + (
            "" if len(shares) == 1 else " --shares " + " ".join(f"{x:.1f}" for x in shares))
        print(f"chosen on validation: {chosen}; ship it with `costmodel blend "
              f"{args.checkpoint} {ship}` (test columns: tau / top-1 / top-5 / a-peak@32)")
        one = len(args.dataset) == 1
        write_json(os.path.join(args.out, "summary.json"),  # whole or not at all
                   {"checkpoint": os.path.basename(args.checkpoint), "with": args.with_,
                    "dataset": args.dataset[0] if one else args.dataset,
                    "seed": args.seed, "variant": args.variant,
                    "sides": all_sides["cross-suite"] if one else all_sides,
                    "weight": weight if len(shares) == 1 else chosen,
                    "rule": "max over blends of the min over sources of validation top-1",
                    "validation": sources,
                    "cross_suite_test": tests["cross-suite"] if one else tests}, indent=1)
        return 0

    return run_command("blend_weight", run, args)


if __name__ == "__main__":
    sys.exit(main())
