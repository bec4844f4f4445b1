"""The `costmodel` command: score, convert, blend and pack checkpoints.

    costmodel evaluate CHECKPOINT [CHECKPOINT ...] --dataset DIR --out DIR [--split shapes]
        [--cache-dir .cache/features] [--no-blend]
    costmodel convert OLD.ckpt NEW.ckpt
    costmodel blend CHECKPOINT [--with lightgbm|xgb|mlp ...] [--weight 0.5] [--shares S ...]
        [--dataset DIR] [--cache-dir .cache/features]
    costmodel ensemble CHECKPOINT CHECKPOINT [...] --out ENSEMBLE.ckpt [--half]
    costmodel report REPORT.json[.xz] [--out REPORT.md]

`costmodel evaluate` scores checkpoints against the tree baselines (MetaSchedule's XGBModel,
TenSet's LightGBM and MLP) on held-out workloads (`costmodel.evaluate`); `costmodel convert`
rewrites a checkpoint of an older format in the current one; `costmodel blend` fits TenSet's
LightGBM or MLP or MetaSchedule's XGBModel (or several) on a checkpoint's training records and
writes them beside the checkpoint, which then predicts the blend (`costmodel.blend`); `costmodel
ensemble` packs the seeds of one configuration into one checkpoint that predicts their mean
log-latency (with the first one's companion, copied beside it); `costmodel report` writes the
readable `report.md` of a kept `report.json` (or the `report.json.xz` results keep in git).
"""

from __future__ import annotations

import argparse
import os
import sys

from datagen.errors import run_command


def _evaluate(args) -> int:
    from costmodel.evaluate import evaluate

    report = evaluate(args.checkpoints, args.dataset, args.out, args.split, args.test_fraction,
                      args.test_families, args.seed, baseline=not args.no_baseline,
                      test_networks=args.test_networks, ensemble=args.ensemble,
                      baselines=args.baselines, cache_dir=args.cache_dir,
                      blend=not args.no_blend, train_dataset=args.train_dataset,
                      head=args.head)
    for name, m in report["models"].items():
        cells = ", ".join(f"{k} {v:.3f}" for k, v in m["mean"].items() if v is not None)
        print(f"{name}: {cells}")
    print(f"report: {args.out}/report.md")
    return 0


def _convert(args) -> int:
    from costmodel.checkpoint import FORMAT_VERSION, convert

    convert(args.source, args.destination)
    print(f"wrote {args.destination} (format {FORMAT_VERSION})")
    return 0


def _blend(args) -> int:
    from costmodel.companion_fit import check_blend, fit_companion, shares_text

    shares = check_blend(args.with_, args.weight, args.shares)
    paths = fit_companion(args.checkpoint, args.dataset, args.weight, args.out, args.cache_dir,
                          model=args.with_, shares=shares)
    print(f"wrote {', '.join(paths)}: {shares_text(args.with_, args.weight, shares)}")
    return 0


def _ensemble(args) -> int:
    from costmodel.predictor import CostModelPredictor
    from datagen.errors import UserError

    if len(args.checkpoints) < 2:
        raise UserError("an ensemble packs two checkpoints or more (one per training seed)")
    if any(os.path.abspath(p) == os.path.abspath(args.out) for p in args.checkpoints):
        raise UserError(f"--out {args.out} is one of the checkpoints packed: write elsewhere")
    predictor = CostModelPredictor.load(args.checkpoints)
    predictor.save(args.out, half=args.half)
    print(f"wrote {args.out}: {len(predictor.members)} networks"
          + (" (float16 weights)" if args.half else "")
          + (f", its {predictor.companion.name} companion copied beside it"
             if predictor.companion else ""))
    return 0


def _report(args) -> int:
    from costmodel.evaluate import write_markdown

    print(f"wrote {write_markdown(args.report, args.out)}")
    return 0


def main(argv: list[str] | None = None) -> int:
    """`costmodel`: evaluate, convert, blend and pack checkpoints."""
    from costmodel.baselines import BASELINES
    from costmodel.blend import DEFAULT_WEIGHT
    from costmodel.companion_fit import COMPANIONS
    from costmodel.splits import SPLITS

    parser = argparse.ArgumentParser(prog="costmodel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("evaluate", help="score checkpoints and the tree baselines")
    p.add_argument("checkpoints", nargs="+", help="one checkpoint per training seed")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True, help="folder for report.json, report.md, plots")
    p.add_argument("--split", choices=SPLITS,
                   help="default: the split the first checkpoint was trained on")
    p.add_argument("--train-dataset", help="cross-suite: the records the checkpoint trained on "
                   "(default: its own dataset); --dataset is the other suite, scored")
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--test-families", nargs="*", help="hold these out (implies --split family)")
    p.add_argument("--test-networks", nargs="*",
                   help="hold these networks out (implies --split network)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--ensemble", action="store_true",
                   help="score the checkpoints as one ensemble (mean log-latency)")
    p.add_argument("--baselines", nargs="+", choices=BASELINES.names(),
                   help=f"baselines to score (default: all of {', '.join(BASELINES.names())})")
    p.add_argument("--no-baseline", action="store_true", help="skip every baseline")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="read and add featurised records here (training's is .cache/features): "
                   "what is cached is not lowered again (default: no cache)")
    p.add_argument("--no-blend", action="store_true",
                   help="score the network alone where a tree companion (NAME.lgb.npz, or "
                   "NAME.xgb.npz with a blend weight: `costmodel blend`) is beside the checkpoint")
    p.add_argument("--head", default="auto",
                   help="a network with a head per CPU (joint_head): auto (the head of the "
                   "records' target, or every head's mean for a target none trained on), own, "
                   "mean or a head's number (default: auto)")
    p.set_defaults(func=_evaluate)
    p = sub.add_parser("convert", help="rewrite an older-format checkpoint in the current format")
    p.add_argument("source")
    p.add_argument("destination")
    p.set_defaults(func=_convert)
    p = sub.add_parser("blend", help="fit a tree model on a checkpoint's training records "
                       "and write it beside the checkpoint, to blend with")
    p.add_argument("checkpoint")
    p.add_argument("--with", dest="with_", nargs="+", choices=COMPANIONS, default=["lightgbm"],
                   metavar="MODEL", help="the tree models to blend with, of "
                   f"{', '.join(COMPANIONS)}: TenSet's LightGBM (NAME.lgb.npz), the pretrained "
                   "XGBModel (NAME.xgb.npz), TenSet's MLP (NAME.mlp.npz); each kept if fitted "
                   "on these records already [lightgbm]")
    p.add_argument("--shares", nargs="+", type=float, metavar="S",
                   help="with several models, each one's share of the blend, adding up to 1 "
                   "with --weight")
    p.add_argument("--dataset", help="the records it was trained on (default: the folder the "
                   "checkpoint names)")
    p.add_argument("--weight", type=float, default=DEFAULT_WEIGHT,
                   help=f"the network's share of the blend, in [0, 1] (default {DEFAULT_WEIGHT})")
    p.add_argument("--out", help="one model's file (default: NAME.lgb.npz, NAME.xgb.npz or "
                   "NAME.mlp.npz beside NAME.ckpt, where it is used)")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="read and add per-store features here (training's is .cache/features)")
    p.set_defaults(func=_blend)
    p = sub.add_parser("ensemble", help="pack the seeds of one configuration into one "
                       "checkpoint (their mean log-latency)")
    p.add_argument("checkpoints", nargs="+", help="one checkpoint per training seed")
    p.add_argument("--out", required=True, help="the ensemble's checkpoint")
    p.add_argument("--half", action="store_true",
                   help="store the weights as float16: half the file, predictions within "
                   "float16's rounding")
    p.set_defaults(func=_ensemble)
    p = sub.add_parser("report", help="write the readable report.md of a report.json "
                       "(or report.json.xz) that `evaluate` wrote")
    p.add_argument("report", help="report.json or report.json.xz")
    p.add_argument("--out", help="the markdown file (default: report.md beside the report, "
                   "where its plots are)")
    p.set_defaults(func=_report)
    args = parser.parse_args(argv)
    return run_command("costmodel", args.func, args)



if __name__ == "__main__":
    sys.exit(main())
