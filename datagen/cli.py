"""`datagen`: collect, inspect and convert measured-schedule datasets.

    datagen collect [WORKLOAD|SUITE ...] --out DIR      sample, build, measure, commit
    datagen stats DIR [DIR ...]                         summary per family and workload; of
                                                        several, what they hold together
    datagen compact DIR                                 rewrite the shards as one, far smaller
    datagen workloads [SUITE]                           list suites and workload keys
    datagen networks [--extract [NAME ...]]             real networks and their tasks
    datagen pack [WORKLOAD|SUITE ...] --dataset DIR --out BATCH   build here, measure elsewhere
    datagen ingest BATCH --dataset DIR                  add a measured batch's records
    datagen runtime-bundle OUT.tar.xz                   the TVM runtime for the device host
    datagen import-db WORKLOAD_JSON RECORD_JSON --out DIR
    datagen export-db DIR --out FOLDER                  as a MetaSchedule JSON database
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading

from datagen.defaults import (DEFAULT_BATCH_SIZE, DEFAULT_BUILD_TIMEOUT_SEC,
                              DEFAULT_EVOLVE_FRACTION, DEFAULT_PER_WORKLOAD, DEFAULT_PROTOCOL,
                              DEFAULT_RETRY_CV, DEFAULT_RUN_TIMEOUT_SEC)
from datagen.errors import UserError, run_command

DATA_ROOT = "data"


def default_dataset(target) -> str:
    """The dataset folder of a target: `data/llvm-CPU` for a CPU (one folder per CPU model, as
    `collect` refuses to mix them), `data/cuda-ARCH` for a GPU, `data/KIND` otherwise."""
    attrs = dict(target.attrs)
    detail = attrs.get("mcpu") or attrs.get("arch") or ""
    return os.path.join(DATA_ROOT, f"{target.kind.name}-{detail}" if detail else
                        target.kind.name)


def _config(args, dataset: str, tracker=None, threads: int | None = None,
            run_timeout: float = DEFAULT_RUN_TIMEOUT_SEC):
    """The `CollectConfig` of a collect or pack command line."""
    from datagen.collect import CollectConfig
    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    if args.per_workload < 1 or args.batch_size < 1:
        raise UserError("--per-workload and --batch-size must be at least 1")
    for name, value, least in (("--draw-workers", args.draw_workers, 1),
                               ("--build-workers", args.build_workers, 1),
                               ("--threads", threads, 1), ("--repeat", args.repeat, 1),
                               ("--min-repeat-ms", args.min_repeat_ms, 0)):
        if value is not None and value < least:
            raise UserError(f"{name} must be at least {least}, not {value}")
    if not 0 <= args.evolve_fraction <= 1:
        raise UserError("--evolve-fraction is a share of each round, from 0 to 1, not "
                        f"{args.evolve_fraction:g}")
    for name, value in (("--build-timeout", args.build_timeout), ("--run-timeout", run_timeout)):
        if not value > 0:  # NaN too
            raise UserError(f"{name} must be a positive number of seconds, not {value:g}")
    target = make_target(args.target, threads)
    torch_model = getattr(args, "torch_model", None)
    workloads = resolve(args.workloads or ([] if torch_model else ["default"]))
    if torch_model:
        from datagen.torch_import import workloads_from_file

        workloads += workloads_from_file(torch_model, target)
    protocol = {**DEFAULT_PROTOCOL, "repeat": args.repeat, "min_repeat_ms": args.min_repeat_ms}
    return CollectConfig(
        out=dataset, workloads=workloads, target=target, per_workload=args.per_workload,
        batch_size=args.batch_size, evolve_fraction=args.evolve_fraction, seed=args.seed,
        protocol=protocol, tracker=tracker, num_threads=threads,
        build_workers=args.build_workers, build_timeout=args.build_timeout,
        run_timeout=run_timeout, retry_cv=args.retry_cv if args.retry_cv > 0 else None,
        draw_workers=args.draw_workers,
        overlap={"on": True, "off": False}.get(getattr(args, "overlap", "auto")))


def _collect(args) -> int:
    from datagen.collect import collect
    from datagen.measure import Tracker

    tracker = Tracker.parse(args.tracker, args.key) if args.tracker else None
    if args.out is None:
        from datagen.tvm_env import make_target

        args.out = default_dataset(make_target(args.target, args.threads))
        print(f"datagen: collecting into {args.out}", file=sys.stderr)
    cfg = _config(args, args.out, tracker, args.threads, args.run_timeout)
    # Ctrl-C or SIGTERM: stop after the program being measured (a KeyboardInterrupt raised
    # while TVM's runner waits would come back through TVM as another error); a second one
    # stops at once, which loses nothing committed either
    stop = threading.Event()

    def request_stop(signum, frame):
        if stop.is_set():
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)
        stop.set()
        print("datagen: stopping after the program being measured (again: at once)",
              file=sys.stderr, flush=True)

    previous = {sig: signal.signal(sig, request_stop) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        summary = collect(cfg, progress=not args.no_progress, stop=stop)
    except KeyboardInterrupt:
        print("datagen: interrupted; every committed round is kept, run the same command to "
              "continue", file=sys.stderr)
        return 130
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    print(f"committed {summary.committed} candidates ({summary.ok} ok, {summary.failed} failed) "
          f"to {args.out}")
    if summary.committed:
        wall = max(summary.wall, 1e-9)
        beside = " (drawing and building beside running)" if summary.overlapped else ""
        idle = (f"; measuring waited {100 * summary.idle_wall / wall:.0f}% of it for a wave "
                "to be drawn and built" if summary.overlapped else "")
        print(f"wall {summary.wall:.1f} s: building {100 * summary.build_wall / wall:.0f}%, "
              f"running {100 * summary.run_wall / wall:.0f}%, "
              f"drawing {100 * summary.draw_wall / wall:.0f}%{beside}, "
              f"{60 * summary.committed / wall:.1f} candidates/min{idle}")
    for key in summary.exhausted:
        print(f"note: {key}: no unseen schedule left in its design space")
    return 0


def _pack(args) -> int:
    from datagen.batch import pack

    summary = pack(_config(args, args.dataset), args.out, progress=not args.no_progress,
                   after=args.after, replay=args.replay)
    print(f"packed batch {summary['batch'][:12]} into {args.out}: {summary['candidates']} "
          f"candidates to measure ({summary['bytes'] / 2**20:.1f} MiB), "
          f"{summary['build_failed']} failed to build")
    print(f"next: on the device host, TVM_USE_RUNTIME_LIB=1 python -m datagen.batch_measure "
          f"{args.out}; then here, datagen ingest {args.out} --dataset {args.dataset}")
    return 0


def _ingest(args) -> int:
    from datagen.batch import ingest

    summary = ingest(args.batch, args.dataset, args.results)
    print(f"ingested {summary['ingested']} records ({summary['ok']} ok) into {args.dataset}; "
          f"{summary['already']} were there already, {summary['unmeasured']} not measured yet")
    return 0


def _compact(args) -> int:
    from datagen.records import ShardWriter, check_folder, shard_paths

    check_folder(args.dataset)
    if not shard_paths(args.dataset):
        raise UserError(f"{args.dataset} holds no records; nothing to compact")
    writer = ShardWriter(args.dataset)
    try:
        shards, before, after = writer.compact()
    finally:
        writer.close()
    if shards < 2 and before == after:
        print(f"{args.dataset}: already one compacted shard ({after / 2**20:.1f} MiB)")
    else:
        print(f"{args.dataset}: {shards} shard{'s' * (shards > 1)} ({before / 2**20:.1f} MiB) "
              f"now one compacted shard "
              f"({after / 2**20:.1f} MiB)")
    return 0


def _runtime_bundle(args) -> int:
    from datagen.batch import runtime_bundle

    files, size = runtime_bundle(args.out)
    print(f"wrote {args.out}: the tvm package without its compiler, {files} files, "
          f"{size / 2**20:.1f} MiB; on the device host unpack it onto PYTHONPATH, install "
          "apache-tvm-ffi for that host's Python, and run with TVM_USE_RUNTIME_LIB=1")
    return 0


def _stats(args) -> int:
    from datagen.stats import format_stats, format_together

    if len(args.dataset) == 1:
        print(format_stats(args.dataset[0], by=args.by or "both"))
        return 0
    for root in args.dataset:  # one summary each, then what they hold together
        print(format_stats(root, by=args.by or "none"))
    print(format_together(args.dataset))
    return 0


def _workloads(args) -> int:
    from datagen.suites import all_suites, get_suite

    if args.suite:
        for w in get_suite(args.suite):
            print(f"{w.key}\t{w.family}\t{w.network}\tweight={w.weight}")
        return 0
    for name, items in all_suites().items():
        families = sorted({w.family for w in items})
        print(f"{name}\t{len(items)} workloads\t{', '.join(families)}")
    return 0


def _networks(args) -> int:
    from collections import Counter

    from datagen.networks import CATALOG, NETWORKS, SUITE_PREFIX, extract, network_suites
    from datagen.tvm_env import make_target

    path = args.catalog or CATALOG
    if args.extract is not None:
        names = args.extract or list(NETWORKS)
        result = extract(names, make_target(args.target, None), path,
                         progress=not args.no_progress)
        print(f"{len(names) - len(result['failed'])} networks extracted; the catalogue "
              f"{path} holds {result['tasks']} distinct tasks of {result['networks']} networks")
        return 2 if result["failed"] else 0
    suites = network_suites(path)
    for name, net in NETWORKS.items():
        tasks = suites.get(SUITE_PREFIX + name, [])
        families = Counter(w.family for w in tasks)
        inputs = ", ".join(v for v, _ in net.inputs)
        print(f"{SUITE_PREFIX}{name}\t{len(tasks)} tasks\tinputs {inputs}\t"
              + ", ".join(f"{f} {n}" for f, n in sorted(families.items())))
    return 0


def _import_db(args) -> int:
    from datagen.msdb import import_database

    n = import_database(args.workload_json, args.record_json, args.out)
    print(f"imported {n} tuning records into {args.out}")
    return 0


def _export_db(args) -> int:
    from datagen.msdb import export_database

    n = export_database(args.dataset, args.out)
    print(f"exported {n} records to {args.out} (database_workload.json, "
          "database_tuning_record.json)")
    return 0


def _draw_options(p: argparse.ArgumentParser) -> None:
    """What to collect and how to build and time it: shared by collect and pack."""
    p.add_argument("workloads", nargs="*", help="workload keys or suite names (default: the "
                   "'default' suite); see 'datagen workloads' and 'datagen networks'")
    p.add_argument("--target", help="TVM target as JSON or a tag (default: llvm for this "
                   "CPU; with --tracker or pack, the target of the remote device)")
    p.add_argument("--per-workload", type=int, default=DEFAULT_PER_WORKLOAD,
                   help="candidates per workload")
    p.add_argument("--batch-size", type=int, default=DEFAULT_BATCH_SIZE,
                   help="candidates per round and shard")
    p.add_argument("--evolve-fraction", type=float, default=DEFAULT_EVOLVE_FRACTION,
                   help="share of each round after the first mutated from the best schedules")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--repeat", type=int, default=DEFAULT_PROTOCOL["repeat"],
                   help="timed repeats per candidate")
    p.add_argument("--min-repeat-ms", type=int, default=DEFAULT_PROTOCOL["min_repeat_ms"],
                   help="minimum length of a repeat")
    p.add_argument("--build-workers", type=int, help="builder processes (default: cores)")
    p.add_argument("--build-timeout", type=float, default=DEFAULT_BUILD_TIMEOUT_SEC,
                   help="seconds per build")
    p.add_argument("--draw-workers", type=int, help="processes drawing the workloads' rounds "
                   "(default: pack, the cores; collect with overlap, every core but one)")
    p.add_argument("--retry-cv", type=float, default=DEFAULT_RETRY_CV,
                   help="measure a candidate again at the end of its round when its repeats "
                   "spread more than this (std/mean; both measurements are kept; 0: never)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="datagen", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("collect", help="sample, build and measure schedules into a dataset")
    _draw_options(p)
    p.add_argument("--out", help="dataset folder (default: the target's own, data/llvm-CPU "
                   "for this host's CPU, e.g. data/llvm-znver4)")
    p.add_argument("--torch-model", metavar="PT2", help="also collect every task of a "
                   "torch.export program saved with torch.export.save")
    p.add_argument("--threads", type=int, help="runtime threads (default: TVM_NUM_THREADS or "
                   "all usable cores)")
    p.add_argument("--run-timeout", type=float, default=DEFAULT_RUN_TIMEOUT_SEC,
                   help="seconds per measurement")
    p.add_argument("--tracker", metavar="HOST:PORT", help="measure through this RPC tracker")
    p.add_argument("--key", help="device key to request from the tracker")
    p.add_argument("--overlap", choices=["auto", "on", "off"], default="auto",
                   help="draw and build the next rounds while the device measures these (auto: "
                   "on unless the device is this host's CPU, whose cores are being timed)")
    p.set_defaults(func=_collect)

    p = sub.add_parser("pack", help="draw and build the next round here, to be measured on "
                       "a device host that cannot be reached (see datagen.batch)")
    _draw_options(p)
    p.add_argument("--dataset", required=True, help="the dataset to draw from and, later, "
                   "to ingest into")
    p.add_argument("--out", required=True, help="the new batch folder")
    p.add_argument("--after", nargs="+", default=[], metavar="BATCH",
                   help="batches packed from this dataset and not yet ingested: draw around "
                   "their candidates (without it, a second pack draws the same ones)")
    p.add_argument("--replay", metavar="DATASET", help="draw nothing: build again every "
                   "schedule this dataset (the same target, measured on another device) "
                   "measured of the workloads, to time them on this batch's device")
    p.set_defaults(func=_pack)

    p = sub.add_parser("ingest", help="add a measured batch's records to its dataset "
                       "(idempotent)")
    p.add_argument("batch", help="the batch folder written by datagen pack")
    p.add_argument("--dataset", required=True)
    p.add_argument("--results", help="results file (default BATCH/results.jsonl)")
    p.set_defaults(func=_ingest)

    p = sub.add_parser("runtime-bundle", help="the tvm package without its compiler, as an "
                       "archive for a device host that measures packed batches")
    p.add_argument("out", help="archive to write (.tar.gz, .tar.xz or .tar)")
    p.set_defaults(func=_runtime_bundle)

    p = sub.add_parser("compact", help="rewrite a dataset's shards as one (far smaller; "
                       "not while a collector writes it)")
    p.add_argument("dataset")
    p.set_defaults(func=_compact)

    p = sub.add_parser("stats", help="summarise a dataset, or several and what they hold "
                       "together")
    p.add_argument("dataset", nargs="+")
    p.add_argument("--by", choices=["family", "workload", "both", "none"],
                   help="the tables after each dataset's summary (default: both for one "
                   "dataset, none for several)")
    p.set_defaults(func=_stats)

    p = sub.add_parser("workloads", help="list suites, or the workloads of one suite")
    p.add_argument("suite", nargs="?")
    p.set_defaults(func=_workloads)

    p = sub.add_parser("networks", help="real networks, and their tasks in the shipped catalogue "
                       "(suites net-NAME and networks)")
    p.add_argument("--extract", nargs="*", metavar="NAME", help="rebuild the catalogue from "
                   "these networks (all if none; needs pip install -e '.[networks]')")
    p.add_argument("--catalog", help="catalogue file (default: the one shipped with datagen)")
    p.add_argument("--target", help="TVM target to extract for (default: llvm for this CPU)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=_networks)

    p = sub.add_parser("import-db", help="import a MetaSchedule JSON database as records")
    p.add_argument("workload_json")
    p.add_argument("record_json")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_import_db)

    p = sub.add_parser("export-db", help="write records as a MetaSchedule JSON database")
    p.add_argument("dataset")
    p.add_argument("--out", required=True)
    p.set_defaults(func=_export_db)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return run_command("datagen", args.func, args)


if __name__ == "__main__":
    sys.exit(main())
