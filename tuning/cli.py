"""`tune`: tune kernels with the learned cost model, and compare tuners side by side.

    tune run WORKLOAD|SUITE ... --trials N --out DIR          one MetaSchedule database each
    tune run --torch-model model.pt2 --trials N --out DIR      every task of a PyTorch model
    tune compare WORKLOAD ... --trials N --out DIR             our BO against MetaSchedule's tuners
"""

from __future__ import annotations

import argparse
import contextlib
import errno
import json
import os
import signal
import sys
import tempfile

from datagen.errors import UserError, atomic_path, output_folder, run_command

DEFAULT_COMPARE_WORKLOAD = "conv2d/h28_w28_ci128_co128_k3_stride1_pad1"


class Interrupted(Exception):
    """Ctrl-C during tuning (TVM may re-raise it as another error from inside its loop)."""


def _writes_fail(*folders: str) -> bool:
    """Whether writing a megabyte into one of `folders` fails (a full disk, no permission)."""
    for folder in folders:
        try:
            with tempfile.TemporaryFile(dir=folder) as f:
                f.write(bytes(1 << 20))
                f.flush()
                os.fsync(f.fileno())
        except OSError:
            return True
    return False


@contextlib.contextmanager
def _interruptible():
    """Turn Ctrl-C into `Interrupted`, even when it surfaces through TVM as another error."""
    hit = []

    def handler(signum, frame):
        hit.append(signum)
        raise KeyboardInterrupt

    previous = signal.signal(signal.SIGINT, handler)
    try:
        yield
    except BaseException as err:
        if hit or isinstance(err, KeyboardInterrupt):
            raise Interrupted from None
        raise
    finally:
        signal.signal(signal.SIGINT, previous)


def _setup(args):
    """Target, measurer and what the tuners search with (the predictor and the pretrained
    XGBModel, when the chosen tuners need them) from the common options."""
    from costmodel import checkpoints
    from costmodel.predictor import torch_device
    from datagen.defaults import COLD_PROTOCOL
    from datagen.measure import Measurer, Tracker
    from datagen.tvm_env import make_target
    from costmodel.pretrained_xgb import pretrained_xgb_file
    from tuning.tuner import TUNERS, SearchInputs, load_predictor

    if args.trials < 1:
        raise UserError(f"--trials must be at least 1, not {args.trials}")
    if args.trials_per_iter < 1 or args.trials_per_iter > args.trials:
        raise UserError(f"--trials-per-iter must be between 1 and --trials ({args.trials}), "
                        f"not {args.trials_per_iter}: a budget below one round measures nothing")
    if args.threads is not None and args.threads < 1:
        raise UserError(f"--threads must be at least 1, not {args.threads}")
    if args.network_share is not None and not 0 <= args.network_share <= 1:
        raise UserError(f"--network-share is a share in [0, 1], not {args.network_share}")
    torch_device(args.device)  # a device this torch cannot use fails before any work
    output_folder(args.out, create=False)  # likewise an --out that cannot be written
    target = make_target(args.target, args.threads)
    timing = getattr(args, "timing", None)
    if timing == "cold" and target.kind.name != "llvm":
        raise UserError(f"--timing cold flushes the CPU caches between runs, and a "
                        f"{target.kind.name} target's kernels run on its device: leave it out")
    # inside a network each kernel meets its weights cold: on a CPU its tasks are timed cold
    cold = timing == "cold" or (timing is None and bool(getattr(args, "torch_model", None))
                                and target.kind.name == "llvm")
    tracker = Tracker.parse(args.tracker, args.key) if args.tracker else None
    tuners = [TUNERS.get(t) for t in (getattr(args, "tuners", None) or [args.tuner])]
    paths = args.checkpoint or [checkpoints.for_target(target.kind.name)]
    predictor = pretrained = None
    if any(t.needs_checkpoint or t.needs_pretrained_xgb for t in tuners):
        predictor = load_predictor(paths, target_kind=target.kind.name, device=args.device,
                                   target=target)
        if args.network_share is not None:
            if predictor.companion is None:
                raise UserError(f"--network-share weighs the network against its tree "
                                f"companion, and {paths[0]} has none beside it (`costmodel "
                                "blend` writes one)")
            predictor.companion.weight = args.network_share
    if any(t.needs_pretrained_xgb for t in tuners):
        pretrained = pretrained_xgb_file(paths[0], predictor.meta,
                                         os.path.join(args.out, "cache"), args.dataset,
                                         progress=not args.no_progress)
    measurer = Measurer(target, COLD_PROTOCOL if cold else None, tracker=tracker,
                        num_threads=args.threads)
    inputs = SearchInputs(predictor, getattr(args, "seed", 0),
                          getattr(args, "acquisition", "ei"), None, pretrained,
                          network_share=args.network_share if predictor is not None else None)
    return target, measurer, inputs


def _write_best(database, mod, target, work_dir: str) -> float | None:
    """Write the best schedule's TIR to best_schedule.py; its latency, None if none ran.

    The best is MetaSchedule's (the lowest mean of the repeats); its latency is ours (their
    median), as in the tuning curve.
    """
    from datagen.measure import run_latency

    record = database.query_tuning_record(mod, target, workload_name="main")
    if record is None:
        return None
    sch = database.query_schedule(mod, target, workload_name="main")
    path = os.path.join(work_dir, "best_schedule.py")
    with atomic_path(path, ".py") as tmp, open(tmp, "w") as f:
        f.write(sch.mod.script())
    return run_latency(record.run_secs)


def _plot_one(curve: list[float], path: str, title: str) -> None:
    from tuning.report import plot_curves

    plot_curves({title: {"tuned": [curve]}}, path)


def _run(args) -> int:
    from datagen.suites import resolve
    from tuning.tuner import read_curve, tune_workload

    if not args.workloads and not args.torch_model:
        raise UserError("name a workload or suite (see 'datagen workloads'), or --torch-model")
    workloads = resolve(args.workloads) if args.workloads else []
    target, measurer, inputs = _setup(args)
    try:
        if args.torch_model:
            return _run_torch(args, target, measurer, inputs)
        for w in workloads:
            wd = os.path.join(args.out, w.key.replace("/", "__"))
            try:
                with _interruptible():
                    db = tune_workload(w.mod, target, args.tuner, args.trials, wd, measurer,
                                       inputs, args.trials_per_iter,
                                       progress=not args.no_progress, desc=w.key)
            except Interrupted:
                print(f"tune: interrupted; the measurements made so far are in {wd}",
                      file=sys.stderr)
                return 130
            curve = next(iter(read_curve(wd).values()), [])
            if curve:
                _plot_one(curve, os.path.join(wd, "curve.png"), w.key)
            best = _write_best(db, w.mod, target, wd)
            shown = "no successful measurement" if best is None else f"best {best * 1e6:.1f} us"
            print(f"{w.key}: {len(curve)} trials, {shown}; database, best_schedule.py and "
                  f"curve.png in {wd}")
    finally:
        measurer.close()
    return 0


def _run_torch(args, target, measurer, inputs) -> int:
    from datagen.torch_import import load_exported, relax_module
    from tuning.tuner import compile_network, read_curve, tune_network

    mod = relax_module(load_exported(args.torch_model), target)
    wd = args.out
    try:
        with _interruptible():
            db = tune_network(mod, None, target, args.tuner, args.trials, wd, measurer,
                              inputs, args.trials_per_iter, progress=not args.no_progress)
    except Interrupted:
        print(f"tune: interrupted; the measurements made so far are in {wd}", file=sys.stderr)
        return 130
    curves = read_curve(wd)
    library = os.path.join(wd, "network.so")
    executable = compile_network(db, mod, target)
    with atomic_path(library, ".so") as tmp:
        try:
            executable.export_library(tmp)
        except Exception as err:  # the compiler's or linker's failure, as TVM hands it back
            if not _writes_fail(wd, tempfile.gettempdir()):
                raise  # not the disk: a bug, with its traceback
            raise OSError(errno.ENOSPC, f"{err.__class__.__name__} while writing, and a test "
                          f"write fails there too; the tuning database in {wd} is whole") \
                from None
    threads = f" and TVM_NUM_THREADS={measurer.num_threads} set, the runtime threads its " \
        "schedules were timed with" if target.kind.name == "llvm" and measurer.tracker is None \
        else ""
    print(f"{args.torch_model}: {sum(len(c) for c in curves.values())} trials over "
          f"{len(curves)} tasks; database in {wd}, the tuned network in {library} (run it "
          "with tvm.relax.VirtualMachine(tvm.runtime.load_module(path), "
          f"tvm.device({'cpu' if target.kind.name == 'llvm' else target.kind.name!r})){threads})")
    return 0


def _compare(args) -> int:
    from datagen.suites import resolve
    from tuning.compare import run_curves
    from tuning.report import format_summary, plot_curves, summarize
    from tuning.tuner import TUNERS

    workloads = resolve(args.workloads or [DEFAULT_COMPARE_WORKLOAD])
    budgets = sorted({b for b in args.budgets if b <= args.trials} | {args.trials})
    if args.remeasure_rounds < 1:
        raise UserError(f"--remeasure-rounds must be at least 1, not {args.remeasure_rounds}")
    if min(args.budgets) < 1:
        raise UserError(f"--budgets are trial counts, at least 1, not {min(args.budgets)}")
    if args.report:  # nothing tuned or measured: no models or device needed
        from datagen.tvm_env import make_target
        from tuning.tuner import SearchInputs

        target, measurer, inputs = make_target(args.target), None, SearchInputs()
    else:
        target, measurer, inputs = _setup(args)
        os.makedirs(args.out, exist_ok=True)
    try:
        with _interruptible():
            results, remeasured = run_curves(
                workloads, args.tuners, args.trials, args.seeds, args.out, target, measurer,
                inputs, args.trials_per_iter, progress=not args.no_progress,
                rounds=args.remeasure_rounds, finished_only=args.report)
    except Interrupted:
        print(f"tune: interrupted; finished runs are kept in {args.out}/runs, run the same "
              "command to continue", file=sys.stderr)
        return 130
    finally:
        if measurer is not None:
            measurer.close()
    from tuning.compare import RESULTS_FILE
    from tuning.runs import read_json

    walls = read_json(os.path.join(args.out, RESULTS_FILE)).get("wall_s")
    summary = summarize(results, remeasured, budgets, args.trials, walls=walls)
    with atomic_path(os.path.join(args.out, "summary.json")) as tmp, open(tmp, "w") as f:
        json.dump(summary, f, indent=1)
    plot_curves(results, os.path.join(args.out, "curves.png"))
    print(format_summary(summary, {t: TUNERS.get(t).description for t in args.tuners}))
    print(f"summary.json and curves.png in {args.out}")
    return 0


def _common(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trials", type=int, default=32, help="measured trials per workload")
    p.add_argument("--out", default="tuning-runs", help="output folder")
    p.add_argument("--checkpoint", action="append", help="cost-model checkpoint (default: "
                   "the shipped one of the target's kind: graphsage-v3.ckpt for llvm, "
                   "graphsage-h100.ckpt for cuda); give it again for a seed ensemble")
    p.add_argument("--target", help="TVM target (default: this machine's CPU)")
    p.add_argument("--tracker", help="RPC tracker host:port, to measure on a remote device")
    p.add_argument("--key", help="device key registered with the tracker")
    p.add_argument("--threads", type=int, help="runtime threads (default: all cores)")
    p.add_argument("--device", default="cpu", help="torch device the cost model runs and "
                   "adapts on: cpu, or cuda (a CUDA build of torch); not where kernels run")
    p.add_argument("--trials-per-iter", type=int, default=8,
                   help="candidates measured per round (the BO's top-k)")
    p.add_argument("--dataset", help="the records the checkpoint was trained on, for the "
                   "ms-xgb-pretrained baseline (default: the dataset the checkpoint names)")
    p.add_argument("--network-share", type=float, metavar="W",
                   help="the network's share of its blend with the tree companion beside the "
                   "checkpoint, for this run: 1 the network alone, 0 the tree model alone "
                   "(default: the companion file's)")
    p.add_argument("--no-progress", action="store_true")


def main(argv: list[str] | None = None) -> int:
    from tuning.search import ACQUISITIONS
    from tuning.tuner import TUNERS

    tuners = "tuners:\n" + "\n".join(f"  {name:<11} {TUNERS.get(name).description}"
                                      for name in TUNERS.names())
    parser = argparse.ArgumentParser(prog="tune", description=__doc__, epilog=tuners,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("run", help="tune workloads or a PyTorch model into MetaSchedule databases",
                       epilog=tuners, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help="workload keys or suites")
    p.add_argument("--torch-model", help="a torch.export .pt2 file: tune all its tasks")
    p.add_argument("--tuner", choices=TUNERS.names(), default="bo")
    p.add_argument("--acquisition", choices=ACQUISITIONS, default="ei")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--timing", choices=["cold", "hot"],
                   help="CPU: cold times each candidate in single runs with the caches flushed "
                   "of every argument but the first, as a kernel meets its weights inside a "
                   "network (MetaSchedule's enable_cpu_cache_flush); hot, again and again on "
                   "the same arguments (default: cold for a --torch-model, else hot)")
    _common(p)
    p.set_defaults(func=_run)
    p = sub.add_parser("compare", help="tuners side by side on the same workloads and budget",
                       epilog=tuners, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("workloads", nargs="*", help=f"default: {DEFAULT_COMPARE_WORKLOAD}")
    p.add_argument("--tuners", nargs="+", choices=TUNERS.names(),
                   default=["bo", "ms-xgb-pretrained", "ms-default"])
    p.add_argument("--remeasure-rounds", type=int, default=10,
                   help="re-measurements of each tuner's best schedule, interleaved")
    p.add_argument("--seeds", nargs="+", type=int, default=[0])
    p.add_argument("--budgets", nargs="+", type=int, default=[8, 16, 32, 64])
    p.add_argument("--report", action="store_true",
                   help="tune nothing: summarise the finished (workload, seed) pairs under "
                   "--out (a comparison still under way, or pairs measured elsewhere)")
    _common(p)
    p.set_defaults(func=_compare)
    args = parser.parse_args(argv)
    return run_command("tune", args.func, args)


if __name__ == "__main__":
    sys.exit(main())
