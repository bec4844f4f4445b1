"""Benchmark: the tuners' search on a network's heaviest tasks, one task at a time.

Tuned whole at 64 trials per task, a network spends most of its trials and most of its time on
a few tasks (ELECTRA-small's three heaviest take about 400 trials each), and a whole-network
pair takes hours. This tunes each of a network's `--tasks` heaviest tasks (FLOPs times the
number of calls, as MetaSchedule's task scheduler weighs them) on its own, as the network's
relax module dispatches it, with every tuner for `--trials`, then measures every run's best
schedule again, `--rounds` rounds interleaved (the best of a run is the fastest of many noisy
measurements, so its in-run figure flatters it): search variants compare where a network's
time goes, in minutes a run.

bo (and any tuner built on its search) runs once per value of `--bo-depths`
(`SearchInputs.max_depth`: how many mutations in a row its new candidates may be from its best
measured schedules once their one-mutation neighbours are all seen; 1 is bo as `tune` runs it)
and of `--bo-parent-shares` (`SearchInputs.parent_share`: the share of its measured schedules,
the fastest, whose mutations it draws, at least its 8 best; 0 is bo as `tune` runs it) and
of `--bo-space-parents` (`SearchInputs.space_parents`: and the fastest this many of each
design space; 0 is bo as `tune` runs it).
A finished run keeps its database and `done.json` under OUT/runs (not committed) and is read
back; OUT/summary.json holds, per task, seed and tuner, the in-run best, the trial it came
at, the re-measured median and spread and the wall time, and per tuner the geometric mean over
(task, seed) of its re-measured best over the reference's (`--reference`).

    python bench/heavy_tasks.py --network electra-small --tasks 3 --trials 400 --seeds 0 \\
        --tuners bo ms-xgb-pretrained ms-default --bo-depths 1 3 \\
        --out bench/results/llvm-znver4/heavy-tasks
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

ROUNDS = 10


def heaviest(mod, target, count: int) -> list:
    """The `count` tasks of a relax module with the most FLOPs times calls, heaviest first."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.analysis import estimate_tir_flops

    tasks = ms.relax_integration.extract_tasks(mod, target)
    return sorted(tasks, key=lambda t: -float(estimate_tir_flops(t.dispatched[0])) * t.weight
                  )[:count]


def label(tuner: str, search: tuple | None) -> str:
    """A run's name: the tuner, and for bo's kind its (depth, parent share, space parents)."""
    if search is None:
        return tuner
    depth, share, per_space = search
    return f"{tuner}-depth{depth}" + (f"-parents{share:g}" if share else "") + \
        (f"-spaces{per_space}" if per_space else "")


def best_schedule(task, target, work_dir: str):
    """The run's best schedule as MetaSchedule picks it (the lowest mean in-run measurement)."""
    from tvm.s_tir import meta_schedule as ms

    database = ms.database.JSONDatabase(work_dir=work_dir)
    return database.query_schedule(task.dispatched[0], target, workload_name="main").mod


def tune_one(task, target, tuner: str, trials: int, work_dir: str, measurer, inputs) -> dict:
    """One run (read back from its `done.json` if it finished with these trials and models)."""
    import shutil

    from datagen.errors import UserError
    from datagen.grid import read_json, write_json
    from tuning.runs import model_ids, models_used, same_models
    from tuning.tuner import best_so_far, read_curve, tune_workload

    models = models_used(tuner, model_ids(inputs))
    done = os.path.join(work_dir, "done.json")
    try:
        made = read_json(done)
    except (OSError, ValueError):  # not finished (or a file no run of this bench wrote)
        made = {}
    if made.get("trials") == trials and same_models(made.get("models"), models):
        return made
    shutil.rmtree(work_dir, ignore_errors=True)
    start = time.perf_counter()
    tune_workload(task.dispatched[0], target, tuner, trials, work_dir, measurer, inputs,
                  progress=True, desc=f"{tuner} {task.task_name}")
    curve = best_so_far(next(iter(read_curve(work_dir).values()), []))
    wall = time.perf_counter() - start
    if not len(curve) or not np.isfinite(curve[-1]):
        raise UserError(f"{tuner} found no schedule of {task.task_name} that built and ran in "
                        f"{trials} trials (its records: {work_dir}); nothing to compare")
    made = {"trials": trials, "models": models, "wall_s": wall,
            "in_run_best_us": float(curve[-1]) * 1e6,
            "found_at": int(np.argmax(curve <= curve[-1])) + 1,
            "best_at_us": {str(n): float(curve[min(n, len(curve)) - 1]) * 1e6
                           for n in (32, 64, 128, 256, trials)}}
    write_json(done, made)  # whole or not at all: a run stopped here is tuned again
    return made


def report(rows: list[dict], names: list[str], args) -> None:
    """Write OUT/summary.json from the finished (task, seed) rows and print them."""
    from datagen.grid import write_json
    from tuning.report import geomean

    ref = args.reference if args.reference in names else names[0]
    summary = {"network": args.network, "trials": args.trials, "rounds": args.rounds,
               "reference": ref, "rows": rows, "over_reference": {
                   n: geomean([r["runs"][n]["remeasured_us"] / r["runs"][ref]["remeasured_us"]
                               for r in rows]) for n in names}}
    write_json(os.path.join(args.out, "summary.json"), summary, indent=1)
    for r in rows[-1:]:
        print(f"{r['task']} (x{r['weight']}), seed {r['seed']}:")
        for n, run in r["runs"].items():
            print(f"  {n:26s} re-measured {run['remeasured_us']:9.1f} us "
                  f"({run['spread_us'][0]:.1f}-{run['spread_us'][1]:.1f}); in run "
                  f"{run['in_run_best_us']:9.1f} at trial {run['found_at']}; "
                  f"{run['wall_min']:.1f} min")
    print(f"geometric mean over {len(rows)} (task, seed) of each over {ref}:")
    for n, v in summary["over_reference"].items():
        print(f"  {n:26s} {v:.3f}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--network", default="electra-small")
    parser.add_argument("--tasks", type=int, default=3, help="how many of the heaviest tasks")
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--tuners", nargs="+", default=["bo", "ms-xgb-pretrained",
                                                        "ms-default"])
    parser.add_argument("--bo-depths", type=int, nargs="+", default=[1, 3])
    parser.add_argument("--bo-parent-shares", type=float, nargs="+", default=[0.0])
    parser.add_argument("--bo-space-parents", type=int, nargs="+", default=[0])
    parser.add_argument("--reference", default="ms-xgb-pretrained")
    parser.add_argument("--rounds", type=int, default=ROUNDS)
    parser.add_argument("--out", default="bench/results/heavy-tasks")
    args = parser.parse_args(argv)
    if min(args.bo_depths) < 1 or args.tasks < 1 or args.trials < 8 or args.rounds < 1 or \
            not all(0 <= share <= 1 for share in args.bo_parent_shares) or \
            min(args.bo_space_parents) < 0:
        raise SystemExit("error: --bo-depths and --tasks must be at least 1, --trials at "
                         "least 8 (a round), --rounds at least 1, --bo-parent-shares "
                         "from 0 to 1 and --bo-space-parents at least 0")

    import network_tuning  # a sibling script

    from costmodel.pretrained_xgb import pretrained_xgb_file
    from datagen.errors import UserError
    from datagen.measure import Measurer
    from datagen.tvm_env import make_target
    from tuning.tuner import TUNERS, SearchInputs, load_predictor

    try:
        network_tuning.check_networks([args.network], [64], args.rounds)
        for tuner in args.tuners:
            TUNERS.get(tuner)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    target = make_target(None)
    predictor = load_predictor(None)
    xgb = pretrained_xgb_file(predictor.members[0].path, predictor.meta,
                              os.path.join(args.out, "cache"))
    mod, _ = network_tuning.export(args.network, target)
    tasks = heaviest(mod, target, args.tasks)
    bo_searches = [(d, share, k) for d in args.bo_depths for share in args.bo_parent_shares
                   for k in args.bo_space_parents]
    runs = [(tuner, search) for tuner in args.tuners
            for search in (bo_searches if TUNERS.get(tuner).deepens else [None])]
    measurer = Measurer(target)
    rows = []
    try:
        for task in tasks:
            for seed in args.seeds:
                made, mods = {}, []
                for tuner, search in runs:
                    inputs = SearchInputs(predictor, seed=seed, pretrained_xgb=xgb, **(
                        {} if search is None else dict(zip(("max_depth", "parent_share",
                                                            "space_parents"), search))))
                    work_dir = os.path.join(args.out, "runs", args.network, task.task_name,
                                            label(tuner, search),
                                            f"seed{seed}-t{args.trials}")
                    made[label(tuner, search)] = tune_one(task, target, tuner, args.trials,
                                                         work_dir, measurer, inputs)
                    mods.append(best_schedule(task, target, work_dir))
                again = measurer.remeasure(mods, args.rounds)
                for (name, run), rounds in zip(made.items(), again):
                    us = [r.median * 1e6 for r in rounds if r.median]
                    run.update(remeasured_us=float(np.median(us)), spread_us=[min(us), max(us)],
                               wall_min=run["wall_s"] / 60)
                rows.append({"task": task.task_name, "weight": int(task.weight), "seed": seed,
                             "runs": made})
                report(rows, [label(*run) for run in runs], args)  # after each (task, seed)
    except UserError as err:  # the runs finished before it are kept and read back next time
        raise SystemExit(f"error: {err}") from None
    finally:
        measurer.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
