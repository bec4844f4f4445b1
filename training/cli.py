"""The `train` and `costmodel` commands.

    train fit --config configs/graphsage.yaml
    train fit --config configs/graphsage.yaml --trainer.fast_dev_run true
    train fit --config configs/graphsage.yaml --trainer.strategy ddp --trainer.devices 2
    train fit --config configs/graphsage.yaml --trainer.accelerator gpu --trainer.devices 1

    costmodel evaluate CHECKPOINT [CHECKPOINT ...] --dataset DIR --out DIR [--split shapes]
        [--cache-dir .cache/features] [--no-blend]
    costmodel convert OLD.ckpt NEW.ckpt
    costmodel blend CHECKPOINT [--with lightgbm|xgb] [--dataset DIR] [--weight 0.5]
        [--cache-dir .cache/features]

`train` is LightningCLI over `CostModelModule` and `ScheduleDataModule`. `costmodel evaluate`
scores checkpoints against the tree baselines (MetaSchedule's XGBModel, TenSet's LightGBM) on
held-out workloads; `costmodel convert` rewrites a checkpoint of an older format in the
current one; `costmodel blend` fits TenSet's LightGBM (or MetaSchedule's XGBModel) on a
checkpoint's training records and writes it beside the checkpoint, which then predicts the
blend of both (`costmodel.blend`).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys

from datagen.errors import UserError, run_command

# what Lightning's --ckpt_path also accepts besides a file: it finds those checkpoints itself
LIGHTNING_CKPT_NAMES = ("best", "last", "hpc", "registry")


def check_ckpt_path(subcommand: str, path: str | None) -> None:
    """A `--ckpt_path` that Lightning would fail on with a traceback, refused in one line: a
    missing file, one that is not a checkpoint or would run code, one without Lightning's
    entries (the shipped checkpoints keep only the model), and for `fit`, which resumes
    training, one without the optimiser's state.

    Raises:
        UserError: as above.
    """
    from costmodel import checkpoint

    if not path or (not os.path.exists(path) and (path in LIGHTNING_CKPT_NAMES
                                                  or path.startswith("registry:"))):
        return
    ckpt = checkpoint.read(path)
    if "pytorch-lightning_version" not in ckpt or \
            (subcommand == "fit" and "optimizer_states" not in ckpt):
        raise UserError(f"{path} holds a trained model without the state of its training "
                        f"(as the shipped checkpoints), which {subcommand} --ckpt_path needs; "
                        f"train from its weights with --model.init_from {path}, or score it "
                        f"with 'costmodel evaluate {path} --dataset DIR --out DIR'")


def _fit(args: list[str] | None) -> int:
    from lightning.pytorch.cli import LightningCLI

    from costmodel import views
    from training.data import ScheduleDataModule
    from training.module import CostModelModule

    class CLI(LightningCLI):
        def add_arguments_to_parser(self, parser):
            # the data featurise each optional view exactly when the model reads it
            for view in views.optional():
                parser.link_arguments(f"model.use_{view.key}", f"data.{view.key}")

        def parse_arguments(self, parser, args):
            super().parse_arguments(parser, args)
            if subcommand := self.config.get("subcommand"):
                check_ckpt_path(subcommand, self.config[subcommand].get("ckpt_path"))

    CLI(CostModelModule, ScheduleDataModule, seed_everything_default=0,
        save_config_kwargs={"overwrite": True}, args=args)
    return 0


def main(args: list[str] | None = None) -> int:
    """`train`: LightningCLI (fit, validate, test, predict)."""
    return run_command("train", _fit, args)


# what every training process imports first (seconds; TVM to featurise what is not cached):
# imported once, in the fork server
FIT_PRELOAD = ["lightning.pytorch.cli", "training.data", "training.module", "costmodel.views",
               "tvm"]
_fork_server = None


def train_process(args: list[str], cwd: str | None = None) -> subprocess.CompletedProcess:
    """`train ARGS...` in a process of its own (LightningCLI seeds and configures
    process-wide state), run in `cwd`; the finished process, its output captured.

    The process is forked from a server that imported Lightning, torch, TVM and the model once
    (`FIT_PRELOAD`), rather than started anew (an import of seconds each): what the benchmarks
    that train many models, and the tests, run. Not for DDP, whose launcher starts the
    command line again: run `train` itself."""
    global _fork_server
    import multiprocessing
    import tempfile

    if _fork_server is None:
        _fork_server = multiprocessing.get_context("forkserver")
        _fork_server.set_forkserver_preload(FIT_PRELOAD)
    with tempfile.TemporaryDirectory(prefix="train-") as logs:
        out, err = os.path.join(logs, "stdout"), os.path.join(logs, "stderr")
        child = _fork_server.Process(target=_train_child,
                                     args=(args, cwd or os.getcwd(), dict(os.environ), out, err))
        child.start()
        child.join()
        return subprocess.CompletedProcess(["train", *args], child.exitcode, _read(out),
                                           _read(err))


def _read(path: str) -> str:
    """A file's text, "" if the process ended before it made it."""
    try:
        with open(path, errors="replace") as f:
            return f.read()
    except FileNotFoundError:
        return ""


def _train_child(args: list[str], cwd: str, environ: dict, out: str, err: str) -> None:
    """The forked process of `train_process`: the caller's folder and environment, its output
    into the files `out` and `err`, `train ARGS` and its exit status."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(environ)
    for stream, path in ((sys.stdout, out), (sys.stderr, err)):
        stream.flush()
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        os.dup2(fd, stream.fileno())
        os.close(fd)
    try:
        status = main(args)
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
    sys.exit(status)


def _evaluate(args) -> int:
    from training.evaluate import evaluate

    report = evaluate(args.checkpoints, args.dataset, args.out, args.split, args.test_fraction,
                      args.test_families, args.seed, baseline=not args.no_baseline,
                      test_networks=args.test_networks, ensemble=args.ensemble,
                      baselines=args.baselines, cache_dir=args.cache_dir,
                      blend=not args.no_blend, train_dataset=args.train_dataset)
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
    from training.companion import fit_companion

    from costmodel import blend

    path = fit_companion(args.checkpoint, args.dataset, args.weight, args.out, args.cache_dir,
                         model=args.with_)
    print(f"wrote {path}: {args.weight:g} of the network blended with "
          f"{1 - args.weight:g} of {blend.TITLES[args.with_]}")
    if args.with_ == "xgb" and os.path.isfile(lgb := blend.beside(args.checkpoint)):
        print(f"note: {lgb} is beside the checkpoint and blends in its place; delete it to "
              "blend with XGBModel")
    return 0


def costmodel_main(argv: list[str] | None = None) -> int:
    """`costmodel`: evaluate, convert and blend checkpoints."""
    from costmodel.blend import DEFAULT_WEIGHT
    from training.baselines import BASELINES
    from training.companion import COMPANIONS
    from training.data import SPLITS

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
    p.set_defaults(func=_evaluate)
    p = sub.add_parser("convert", help="rewrite an older-format checkpoint in the current format")
    p.add_argument("source")
    p.add_argument("destination")
    p.set_defaults(func=_convert)
    p = sub.add_parser("blend", help="fit a tree model on a checkpoint's training records "
                       "and write it beside the checkpoint, to blend with")
    p.add_argument("checkpoint")
    p.add_argument("--with", dest="with_", choices=COMPANIONS, default="lightgbm",
                   help="TenSet's LightGBM (NAME.lgb.npz) or the pretrained XGBModel "
                   "(NAME.xgb.npz, kept if there, given the weight) [lightgbm]")
    p.add_argument("--dataset", help="the records it was trained on (default: the folder the "
                   "checkpoint names)")
    p.add_argument("--weight", type=float, default=DEFAULT_WEIGHT,
                   help=f"the network's share of the blend, in [0, 1] (default {DEFAULT_WEIGHT})")
    p.add_argument("--out", help="default: NAME.lgb.npz (NAME.xgb.npz) beside NAME.ckpt, "
                   "where it is used")
    p.add_argument("--cache-dir", metavar="DIR",
                   help="read and add per-store features here (training's is .cache/features)")
    p.set_defaults(func=_blend)
    args = parser.parse_args(argv)
    return run_command("costmodel", args.func, args)


if __name__ == "__main__":
    sys.exit(main())
