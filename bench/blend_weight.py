"""Benchmark: the blend weight of a checkpoint and its pretrained XGBModel, chosen out of
distribution.

A checkpoint blends with its pretrained XGBModel at a weight (`costmodel blend --with xgb`,
`costmodel.blend`): the network's share of the standardised blend, the rest XGBModel's. The
weight is chosen on validation workloads of out-of-distribution splits, never on workloads
like the training tasks, and never on the workloads it is then reported on:

- cross-suite: the workloads of another suite (`--dataset`, say the hand-written `full` suite
  beside the network tasks the checkpoint trained on), split at random (`--seed`) into a
  validation half and a test half; the checkpoint and its pretrained XGBModel score both;
- the validation curves of `bench/ablations.py --hybrid xgb --hybrid-weight val` runs
  (`--ablation DIR`: their summary.json), say the novel-shapes split, whose validation
  workloads share no buffer shape with any training workload.

The weight chosen is the one whose worst validation top-1 over the sources is highest (ties:
the higher mean validation Kendall tau, then the weight nearer 1/2): a weight that gives the
first pick away on any kind of unseen kernel loses. Prints every weight's figures on each side
and writes summary.json (one scoring pass of minutes: a stopped run leaves no partial file and
is run again); `costmodel blend CHECKPOINT --with xgb --weight W` ships the choice.

    python bench/blend_weight.py --checkpoint checkpoints/graphsage-v3.ckpt \\
        --dataset data/llvm-full --ablation bench/results/ood/ablations-v3-znver4-deep \\
        --out bench/results/ood/blend-weight-v3-znver4-deep

Where an ablation run tried several variants, `--variant NAME` reads the checkpoint's own.
"""

from __future__ import annotations

import argparse
import os
import sys

import numpy as np

WEIGHTS = tuple(i / 10 for i in range(11))
METRICS = ("kendall_tau", "top1_score", "top5_score", "apeak32")


def cross_suite_curves(args) -> tuple[dict, dict]:
    """Per side ("val", "test") of --dataset's workloads, per weight, the blend's metrics; and
    what the sides hold."""
    from costmodel.blend import Companion, blend
    from costmodel.predictor import CostModelPredictor
    from datagen.errors import UserError
    from datagen.records import read_records
    from costmodel.splits import RECORD_COLUMNS, check_one_target, usable
    from costmodel.evaluate import grouped_metrics
    from costmodel.pretrained_xgb import beside

    alone = CostModelPredictor.load(args.checkpoint, cache_dir=args.cache_dir, blend=False)
    xgb_file = beside(args.checkpoint)
    if not os.path.isfile(xgb_file):
        raise UserError(f"{xgb_file} is missing: the checkpoint's pretrained XGBModel is what "
                        "it blends with (fit it with `costmodel blend CHECKPOINT --with xgb`)")
    companion = Companion.load(xgb_file, alone.meta, args.checkpoint, weight=0.5)
    both = CostModelPredictor(alone.members, args.cache_dir, companion)
    frame, _ = usable(read_records(args.dataset, RECORD_COLUMNS))
    if frame.empty:
        raise UserError(f"{args.dataset} has no successfully measured records")
    check_one_target(frame, args.dataset)
    trained = set(alone.meta["sides"]["train"]) | set(alone.meta["sides"]["val"])
    frame = frame[~frame.workload_key.isin(trained)].reset_index(drop=True)
    keys = sorted(frame.workload_key.unique())
    if len(keys) < 2:
        raise UserError(f"{args.dataset} has {len(keys)} workload(s) the checkpoint did not "
                        "train on: the cross-suite sides need two at least")
    val = set(np.random.default_rng(args.seed).choice(keys, len(keys) // 2, replace=False))
    graphs = list(both.featurizer.iter_records(
        zip(frame.workload_ir, frame.trace, frame.trace_hash)))
    log_seconds, throughput, _ = both.predict_parts(graphs)
    groups = frame.workload_key.to_numpy()
    curves, sides = {}, {}
    for side, mask in (("val", frame.workload_key.isin(val).to_numpy()),
                       ("test", ~frame.workload_key.isin(val).to_numpy())):
        part = frame[mask].reset_index(drop=True)
        sides[side] = {"workloads": int(part.workload_key.nunique()), "records": len(part)}
        curves[side] = {}
        for w in WEIGHTS:
            mixed = blend(log_seconds[mask], throughput[mask], groups[mask], w)
            found = grouped_metrics(part, mixed, latency=False)["overall"]
            curves[side][f"{w:.1f}"] = {m: found[m] for m in METRICS}
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


def choose(sources: dict[str, dict]) -> float:
    """The weight whose worst validation top-1 over `sources` (name -> weight -> metrics) is
    highest; ties: the higher mean validation tau, then the weight nearer 1/2."""
    def key(w):
        cells = [curve[f"{w:.1f}"] for curve in sources.values()]
        return (min(c["top1_score"] for c in cells),
                float(np.mean([c["kendall_tau"] for c in cells])), -abs(w - 0.5))
    return max(WEIGHTS, key=key)


def main() -> int:
    from datagen.errors import output_folder, run_command
    from datagen.grid import write_json

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--checkpoint", required=True)
    parser.add_argument("--dataset", required=True,
                        help="the other suite's records (cross-suite): split into validation "
                        "and test halves")
    parser.add_argument("--ablation", nargs="*", default=[], metavar="DIR",
                        help="bench/ablations.py outputs whose xgb blends' validation curves "
                        "also choose")
    parser.add_argument("--variant", help="the checkpoint's variant in each --ablation "
                        "summary (needed where a run tried several)")
    parser.add_argument("--seed", type=int, default=0, help="seeds the cross-suite halves")
    parser.add_argument("--cache-dir", default=".cache/features")
    parser.add_argument("--out", default="bench/results/ood/blend-weight")
    args = parser.parse_args()

    def run(args) -> int:
        output_folder(args.out, create=False)
        sources = {}
        for path in args.ablation:
            for name, curve in ablation_curves(path, args.variant).items():
                sources[f"{os.path.basename(os.path.normpath(path))}/{name}"] = curve
        curves, sides = cross_suite_curves(args)
        sources["cross-suite"] = curves["val"]
        weight = choose(sources)
        print(f"== blend weight of {os.path.basename(args.checkpoint)} with its pretrained "
              f"XGBModel: the network's share ==")
        print(f"cross-suite on {args.dataset}: validation {sides['val']['workloads']} "
              f"workloads, test {sides['test']['workloads']} (seed {args.seed})")
        print(f"{'weight':>6}  " + "  ".join(f"{name[:30]:>30}" for name in sources)
              + "  cross-suite test: tau / top-1 / top-5 / a-peak@32")
        for w in WEIGHTS:
            cells = [sources[name][f"{w:.1f}"] for name in sources]
            test = curves["test"][f"{w:.1f}"]
            print(f"{w:>6.1f}  " + "  ".join(
                f"{'top-1 %.3f tau %.3f' % (c['top1_score'], c['kendall_tau']):>30}"
                for c in cells) + "  " + " / ".join(f"{test[m]:.3f}" for m in METRICS)
                + ("   <- chosen" if w == weight else ""))
        print(f"chosen on validation: {weight:.1f}; ship it with `costmodel blend "
              f"{args.checkpoint} --with xgb --weight {weight:.1f}`")
        write_json(os.path.join(args.out, "summary.json"),  # whole or not at all
                   {"checkpoint": os.path.basename(args.checkpoint), "dataset": args.dataset,
                    "seed": args.seed, "variant": args.variant, "sides": sides, "weight": weight,
                    "rule": "max over weights of the min over sources of validation top-1",
                    "validation": sources, "cross_suite_test": curves["test"]}, indent=1)
        return 0

    return run_command("blend_weight", run, args)


if __name__ == "__main__":
    sys.exit(main())
