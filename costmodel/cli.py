"""`costmodel`: evaluate trained cost models.

    costmodel evaluate CHECKPOINT [CHECKPOINT ...] --dataset DIR --out DIR [--split shapes]
"""

from __future__ import annotations

import argparse
import sys

from datagen.tvm_env import run_command


def _evaluate(args) -> int:
    from costmodel.evaluate import evaluate

    report = evaluate(args.checkpoints, args.dataset, args.out, args.split, args.test_fraction,
                      args.test_families, args.seed, baseline=not args.no_baseline)
    for name, m in report["models"].items():
        cells = ", ".join(f"{k} {v:.3f}" for k, v in m["mean"].items() if v is not None)
        print(f"{name}: {cells}")
    print(f"report: {args.out}/report.md")
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="costmodel", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("evaluate", help="score checkpoints and the XGBoost baseline")
    p.add_argument("checkpoints", nargs="+", help="one checkpoint per training seed")
    p.add_argument("--dataset", required=True)
    p.add_argument("--out", required=True, help="folder for report.json, report.md, plots")
    p.add_argument("--split", choices=["shapes", "family"],
                   help="default: the split the first checkpoint was trained on")
    p.add_argument("--test-fraction", type=float, default=0.2)
    p.add_argument("--test-families", nargs="*")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--no-baseline", action="store_true", help="skip MetaSchedule's XGBModel")
    p.set_defaults(func=_evaluate)
    args = parser.parse_args(argv)
    return run_command("costmodel", args)


if __name__ == "__main__":
    sys.exit(main())
