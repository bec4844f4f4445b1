"""Benchmark: where each tuner's network spends its time, kernel by kernel, against what the
tuner measured of each task alone.

Every tuner of part `networks` (bench/network_tuning.py) optimises each task timed alone by
MetaSchedule's runner (its own inputs, hot in cache, many repeats), while the figure is the
whole compiled network. This compiles the networks of one finished (network, seed, budget)
from the databases that part keeps (OUT/tuning-networks/runs), runs each --rounds times,
interleaved, with the relax VM's instrument timing every call, and prints per kernel: its calls
per inference and, per tuner, the in-run best of its task times those calls (alone) beside
its summed time in the network (the median over rounds); then per tuner the totals of both, the
VM's other calls and the whole instrumented inference. The networks run as part `networks`
runs them, in a worker with the runner's threads. The instrument is a Python callback around
every call, so the inference is slower than part `networks` measures it (its figure is in the
pair file; on the 2-core hosts here, with two threads, 1.5-1.7 times slower); kernels are
timed on their own, between the callbacks, so read the per-kernel times against each other,
not against the uninstrumented network.

With --alone, each tuner's best schedule of every task is also built and timed alone again on
this host, with the tuning protocol (hot: MetaSchedule's runner repeats it, its arguments in
cache) and with the caches flushed of every argument but the first before each of 10 single
runs (cold: its weights out of the caches; `datagen.measure`'s `cache_flush`),
the tuners interleaved --alone-rounds times: which of the two orders the tuners as the network
does.

With --reach B, the profile of a race (part `networks` with --network-reach B) in place of a
pair's: each tuner's run at --budget against ms-default's at B trials per task
(default tuners then: bo and ms-default), kept as NETWORK__seedS__bB1-vs-bB.json.xz.

With --finalists K, in place of the profile: a task's in-run best is the lowest of many noisy
timings, and a search that measures many near-equal candidates keeps a lucky one the more
often (the winner's curse). Each tuner's K best schedules of every task are timed again (hot,
all tuners' finalists interleaved --finalist-rounds times), each task's fastest of them kept,
and every tuner's network built both ways, from its run's in-run bests and from those
finalists, the 2 x tuners networks measured interleaved --rounds times (uninstrumented, as
part `networks` measures): what re-timing the finalists before one is kept buys each tuner.

    python bench/network_profile.py electra-small --seed 0 --budget 16 [--rounds 10] [--alone]
        [--out bench/results]
    python bench/network_profile.py electra-small --seed 0 --budget 64 --finalists 4
    python bench/network_profile.py electra-small --seed 2 --budget 64 --reach 256

Writes OUT/tuning-networks/profiles/NETWORK__seedS__bB.json.xz (with --finalists K,
NETWORK__seedS__bB.finalists-kK.json.xz).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys

import numpy as np

import network_tuning  # a sibling script
from datagen.defaults import COLD_PROTOCOL

BUILTIN = "vm.builtin."  # the VM's own calls (allocation, shape checks, ...), not kernels


def in_run_bests(database, tasks, target) -> dict[str, float | None]:
    """Each task's best latency in its tuner's run (seconds; None: no successful record)."""
    from datagen.measure import run_latency

    bests = dict.fromkeys(task.task_name for task in tasks)
    for i, record in _top_records(database, tasks, 1):
        bests[tasks[i].task_name] = run_latency(record.run_secs)
    return bests


def timed_alone(databases: dict, tasks, target, rounds: int) -> dict:
    """Per protocol (hot: the tuning protocol; cold: `COLD_PROTOCOL`), per tuner and task: the
    median over `rounds` interleaved measurements of its best schedule's latency alone
    (seconds; None: no record, or it failed)."""
    from datagen.measure import Measurer, run_latency

    cells, mods = [], []
    for tuner, database in databases.items():
        for i, record in _top_records(database, tasks, 1):
            cells.append((tuner, tasks[i].task_name))
            mods.append(_scheduled(record))
    out: dict = {}
    for name, protocol in (("hot", None), ("cold", COLD_PROTOCOL)):
        measurer = Measurer(target, protocol)
        try:
            results = measurer.remeasure(mods, rounds)
        finally:
            measurer.close()
        out[name] = {t: {} for t in databases}
        for (tuner, task), runs in zip(cells, results):
            lat = [x for x in (run_latency(r.latencies) for r in runs) if x is not None]
            out[name][tuner][task] = float(np.median(lat)) if lat else None
    return out


def timed_calls(executables: dict, arrays: list, target, rounds: int) -> dict:
    """Per tuner and round: the seconds each called function took in one inference (summed
    over its calls), its calls, and the whole inference; the tuners interleaved, after one
    untimed inference each, in a worker with the runner's threads
    (`datagen.measure.time_networks`)."""
    from datagen.measure import time_networks

    return time_networks(executables, arrays, target, rounds, per_call=True)


def summarize(rounds: dict, bests: dict, alone_again: dict | None = None) -> dict:
    """Per kernel and tuner: calls per inference, the median over rounds of its summed time in
    the network, and its task's in-run best times those calls (with `alone_again`, from
    `timed_alone`, also its hot and cold latency alone times those calls); per tuner the
    totals."""
    tuners = list(rounds)
    symbols = sorted({s for runs in rounds.values() for r in runs for s in r["spent_s"]})
    kernels, totals = {}, {}
    for tuner in tuners:
        runs = rounds[tuner]
        totals[tuner] = {"inference_s": float(np.median([r["total_s"] for r in runs])),
                         "kernels_s": 0.0, "builtins_s": 0.0, "alone_s": 0.0,
                         "untuned_kernels_s": 0.0}
        for symbol in symbols:
            in_network = float(np.median([r["spent_s"].get(symbol, 0.0) for r in runs]))
            if symbol.startswith(BUILTIN):
                totals[tuner]["builtins_s"] += in_network
                continue
            count = int(np.median([r["calls"].get(symbol, 0) for r in runs]))
            best = bests[tuner].get(symbol)
            alone = None if best is None else best * count
            kernels.setdefault(symbol, {"calls": count})[tuner] = {
                "in_network_s": in_network, "alone_s": alone}
            for protocol, times in (alone_again or {}).items():
                again = times[tuner].get(symbol)
                kernels[symbol][tuner][f"{protocol}_s"] = None if again is None else again * count
                if again is not None:
                    totals[tuner][f"{protocol}_s"] = totals[tuner].get(f"{protocol}_s", 0.0) \
                        + again * count
            totals[tuner]["kernels_s"] += in_network
            if alone is None:
                totals[tuner]["untuned_kernels_s"] += in_network
            else:
                totals[tuner]["alone_s"] += alone
    return {"kernels": kernels, "totals": totals}


def format_profile(summary: dict, tuners: list[str], top: int) -> str:
    """The kernels whose time in the network differs most between tuners, then the totals."""
    us = 1e6
    rows = sorted(summary["kernels"].items(), key=lambda kv: -(
        max(kv[1][t]["in_network_s"] for t in tuners if t in kv[1])
        - min(kv[1][t]["in_network_s"] for t in tuners if t in kv[1])))
    head = f"{'kernel':<48}{'calls':>6}" + "".join(f"{t[:18]:>20}" for t in tuners)
    lines = [f"-- the {top} kernels whose time differs most between tuners: us per inference "
             "in the network (alone: in-run best x calls) --", head]
    for symbol, row in rows[:top]:
        cells = ""
        for t in tuners:
            cell = row.get(t)
            alone = "-" if cell is None or cell["alone_s"] is None \
                else f"{cell['alone_s'] * us:.0f}"
            text = "" if cell is None else f"{cell['in_network_s'] * us:.0f} ({alone})"
            cells += f"{text:>20}"
        lines.append(f"{symbol[:47]:<48}{row['calls']:>6}{cells}")
    lines.append("-- totals, us per inference --")
    for key, label in (("alone_s", "tuned kernels alone (in-run best x calls)"),
                       ("kernels_s", "every kernel in the network"),
                       ("untuned_kernels_s", "  of which kernels with no record"),
                       ("hot_s", "tuned kernels alone again, hot (x calls)"),
                       ("cold_s", "tuned kernels alone again, cold (x calls)"),
                       ("builtins_s", "the VM's own calls"),
                       ("inference_s", "the whole instrumented inference")):
        if key in summary["totals"][tuners[0]]:
            lines.append(f"{label:<54}" + "".join(
                f"{summary['totals'][t].get(key, 0.0) * us:>20.0f}" for t in tuners))
    return "\n".join(lines)


def _top_records(database, tasks, top_k: int) -> list[tuple[int, object]]:
    """(task index, record) of each task's `top_k` best records in `database`, best first."""
    out = []
    for i, task in enumerate(tasks):
        mod = task.dispatched[0]
        if not database.has_workload(mod):
            continue
        for record in database.get_top_k(database.commit_workload(mod), top_k):
            out.append((i, record))
    return out


def _scheduled(record):
    """The record's schedule applied to its workload (a trace is data: its instructions are
    MetaSchedule's primitives, replayed, nothing else runs)."""
    from tvm import s_tir

    sch = s_tir.Schedule(record.workload.mod, debug_mask=0)
    record.trace.apply_to_schedule(sch, remove_postproc=False)
    return sch.mod


def remeasure_finalists(databases: dict, tasks, target, measurer, top_k: int = 4,
                        rounds: int = 3, out: dict | None = None) -> tuple[dict, dict]:
    """Per database, a database holding each task's fastest finalist when timed again: each
    task's `top_k` records of each database built and timed again `rounds` times interleaved
    (every database's candidates in the same rounds, so a slow spell of the machine hits all of
    them alike), the one with the lowest median of the rounds kept, its `run_secs` those
    rounds' latencies.

    Args:
        databases: name -> MetaSchedule database (a tuner's run).
        tasks: MetaSchedule's `ExtractedTask`s of the network, what the databases tuned.
        target: the target the records were measured for.
        measurer: a `datagen.measure.Measurer` with the tuning protocol.
        top_k: finalists per task (1: the in-run best alone, timed again).
        rounds: interleaved timings of every finalist.
        out: name -> folder for a `JSONDatabase` of the choices, written afresh (default: in
            memory).

    Returns:
        (name -> database of the choices, name -> per task name: the in-run rank of the
        finalist kept (0: the in-run best), its median latency and the in-run best's, seconds).

    Raises:
        UserError: `top_k` or `rounds` below 1.
    """
    from tvm.s_tir import meta_schedule as ms

    from datagen.errors import UserError
    from datagen.measure import run_latency

    if top_k < 1 or rounds < 1:
        raise UserError(f"finalists need top_k and rounds of at least 1, not {top_k} and "
                        f"{rounds}")
    cells, mods = [], []
    for name, database in databases.items():
        for i, record in _top_records(database, tasks, top_k):
            cells.append((name, i, record))
            mods.append(_scheduled(record))
    results = measurer.remeasure(mods, rounds) if mods else []
    timed: dict = {}  # (name, task index) -> [(median, rank, record, latencies)]
    for (name, i, record), runs in zip(cells, results):
        latencies = [x for x in (run_latency(r.latencies) for r in runs) if x is not None]
        entry = timed.setdefault((name, i), [])
        median = float(np.median(latencies)) if len(latencies) == rounds else float("inf")
        entry.append((median, len(entry), record, latencies))
    chosen, report = {}, {}
    for name in databases:
        if out is not None and name in out:
            shutil.rmtree(out[name], ignore_errors=True)
            os.makedirs(out[name])
            db = ms.database.JSONDatabase(work_dir=out[name])
        else:
            db = ms.database.MemoryDatabase()
        report[name] = {}
        for i, task in enumerate(tasks):
            finalists = timed.get((name, i))
            if not finalists:
                continue
            median, rank, record, latencies = min(finalists, key=lambda f: (f[0], f[1]))
            if not np.isfinite(median):  # every finalist failed again: keep the run's own
                rank, record, latencies = 0, finalists[0][2], list(finalists[0][2].run_secs)
            workload = db.commit_workload(record.workload.mod)
            db.commit_tuning_record(ms.database.TuningRecord(
                record.trace, workload, [float(x) for x in latencies], record.target,
                record.args_info))
            report[name][task.task_name] = {
                "rank": rank, "median_s": median if np.isfinite(median) else None,
                "in_run_best_s": run_latency(finalists[0][2].run_secs),
                "finalists": len(finalists)}
        chosen[name] = db
    return chosen, report


def finalists_networks(databases: dict, tasks, mod, arrays, target, args, run_dirs: dict) -> dict:
    """Every tuner's network from its in-run bests and from its re-timed finalists, measured
    interleaved. Per tuner: the median latency of both (us), the median of the per-round
    ratios finalists / in-run bests, and the tasks whose kept schedule changed; per pair of
    the first tuner and another, its ratio both ways; each task's choice
    (`remeasure_finalists`'s report); every round's seconds. The finalists' databases are
    written beside the runs (`finalists-kK`)."""
    from datagen.measure import Measurer, time_networks
    from tuning.tuner import compile_network

    measurer = Measurer(target, None)
    try:
        chosen, report = remeasure_finalists(
            databases, tasks, target, measurer, args.finalists, args.finalist_rounds,
            out={t: os.path.join(d, f"finalists-k{args.finalists}") for t, d in run_dirs.items()})
    finally:
        measurer.close()
    executables = {}
    for tuner, database in databases.items():
        executables[tuner] = compile_network(database, mod, target)
        executables[f"{tuner}+finalists"] = compile_network(chosen[tuner], mod, target)
    latency = time_networks(executables, arrays, target, args.rounds)

    def ratio(a: str, b: str) -> float:
        return float(np.median(np.array(latency[a]) / np.array(latency[b])))

    tuners = list(databases)
    return {
        "top_k": args.finalists, "rounds": args.finalist_rounds, "latency": latency,
        "tuners": {t: {"in_run_us": float(np.median(latency[t])) * 1e6,
                       "finalists_us": float(np.median(latency[f"{t}+finalists"])) * 1e6,
                       "ratio": ratio(f"{t}+finalists", t),
                       "changed": sum(1 for c in report[t].values() if c["rank"] != 0),
                       "tasks": len(report[t])} for t in tuners},
        "paired": {f"{tuners[0]}/{o}": {"in_run": ratio(tuners[0], o),
                                        "finalists": ratio(f"{tuners[0]}+finalists",
                                                           f"{o}+finalists")}
                   for o in tuners[1:]},
        "choices": report}


def format_finalists(result: dict) -> str:
    """Per tuner: its network from the in-run bests and from the re-timed finalists; then the
    first tuner's ratio to each other both ways."""
    lines = [f"-- each task's {result['top_k']} best timed again ({result['rounds']} rounds), "
             "the fastest kept: us per inference, median of the interleaved rounds --",
             f"{'tuner':<22}{'in-run bests':>14}{'finalists':>12}{'ratio':>8}"
             f"{'tasks changed':>15}"]
    for t, row in result["tuners"].items():
        lines.append(f"{t:<22}{row['in_run_us']:>14.0f}{row['finalists_us']:>12.0f}"
                     f"{row['ratio']:>8.3f}{row['changed']:>10} of {row['tasks']}")
    for pair, both in result["paired"].items():
        lines.append(f"{pair}: {both['in_run']:.3f} from the in-run bests, "
                     f"{both['finalists']:.3f} from the finalists (median of the per-round "
                     "ratios)")
    return "\n".join(lines)


def profile(args) -> None:
    """Compile the pair's networks from their runs' databases, time them and print the
    profile.

    Raises:
        UserError: bad rounds or budget, or a tuner's run of the pair has not finished.
    """
    from tvm.s_tir import meta_schedule as ms

    from datagen.errors import UserError
    from datagen.grid import Grid
    from datagen.tvm_env import make_target
    from tuning.tuner import compile_network

    network_tuning.check_networks([args.network], [args.budget], args.rounds)
    if args.alone_rounds < 1:
        raise UserError(f"--alone-rounds must be at least 1, not {args.alone_rounds}")
    if args.finalists < 0 or args.finalist_rounds < 1:
        raise UserError(f"--finalists must be 0 or more and --finalist-rounds at least 1, not "
                        f"{args.finalists} and {args.finalist_rounds}")
    if args.reach is not None and args.reach <= args.budget:
        raise UserError(f"--reach is {network_tuning.REFERENCE}'s budget in the race, above "
                        f"--budget ({args.budget}), not {args.reach}")
    if args.finalists and args.alone:
        raise UserError("--finalists measures the networks in place of the profile, and "
                        "--alone is part of the profile: give one of them")
    target = make_target(None)
    grid = Grid(os.path.join(args.out, "tuning-networks"))
    tuners = args.tuners or (["bo", network_tuning.REFERENCE] if args.reach
                             else list(network_tuning.TUNERS))
    budgets = {t: args.budget for t in tuners}
    if args.reach:
        budgets[network_tuning.REFERENCE] = args.reach
    # the reference of a race under its budget's name, as the race's cell names it
    runs = {t if budgets[t] == args.budget else f"{t}@{budgets[t]}":
            os.path.join("runs", args.network, t, f"seed{args.seed}-b{budgets[t]}")
            for t in tuners}
    tuners = list(runs)
    if missing := [t for t, run in runs.items()
                   if grid.read(os.path.join(run, "done.json")) is None]:
        raise UserError(f"no finished run of {', '.join(missing)} for {args.network} seed "
                        f"{args.seed} at {args.budget} trials per task (a name@B: at B) in "
                        f"{grid.path('runs')}; run part `networks` of "
                        "bench/tuning_vs_metaschedule.py first")
    mod, arrays = network_tuning.export(args.network, target)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    databases = {t: ms.database.JSONDatabase(work_dir=grid.path(run)) for t, run in runs.items()}
    name = f"{args.network}__seed{args.seed}__b{args.budget}" \
        + (f"-vs-b{args.reach}" if args.reach else "")
    if args.finalists:
        result = finalists_networks(databases, tasks, mod, arrays, target, args,
                                    {t: grid.path(run) for t, run in runs.items()})
        result.update(network=args.network, seed=args.seed, per_task=args.budget,
                      network_rounds=args.rounds)
        grid.write(os.path.join("profiles", f"{name}.finalists-k{args.finalists}.json.xz"),
                   result)
        print(format_finalists(result))
        return
    bests = {t: in_run_bests(db, tasks, target) for t, db in databases.items()}
    executables = {t: compile_network(db, mod, target) for t, db in databases.items()}
    calls = timed_calls(executables, arrays, target, args.rounds)
    again = timed_alone(databases, tasks, target, args.alone_rounds) if args.alone else None
    summary = summarize(calls, bests, again)
    pair = grid.read(network_tuning.reach_cell(args.network, args.seed, args.budget, args.reach)
                     if args.reach else
                     network_tuning.pair_cell(args.network, args.seed, args.budget))
    summary.update(network=args.network, seed=args.seed, per_task=args.budget,
                   reference_per_task=args.reach,
                   rounds=args.rounds, alone_rounds=args.alone_rounds if args.alone else 0,
                   pair_latency_s=None if pair is None else {
                       t: float(np.median(v)) for t, v in pair["latency"].items()})
    grid.write(os.path.join("profiles", f"{name}.json.xz"), summary)
    print(format_profile(summary, tuners, args.top))
    if summary["pair_latency_s"]:
        print("uninstrumented, from the pair (us):  " + ", ".join(
            f"{t} {v * 1e6:.0f}" for t, v in summary["pair_latency_s"].items()))


def main(argv: list[str] | None = None) -> int:
    from datagen.errors import run_command

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("network", choices=network_tuning.NETWORKS)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--budget", type=int, default=network_tuning.BUDGETS[0],
                        help="trials per task of the finished pair")
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--alone", action="store_true",
                        help="also time every tuner's best schedules alone again, hot and cold")
    parser.add_argument("--alone-rounds", type=int, default=3)
    parser.add_argument("--finalists", type=int, default=0, metavar="K",
                        help="in place of the profile: time each task's K best schedules of every "
                        "tuner again and measure the networks built from the fastest beside "
                        "the tuners' own (0: the profile)")
    parser.add_argument("--finalist-rounds", type=int, default=3)
    parser.add_argument("--reach", type=int, default=None, metavar="B",
                        help=f"profile the race against {network_tuning.REFERENCE} at B trials "
                        "per task (part `networks` with --network-reach B) in place of the pair")
    parser.add_argument("--tuners", nargs="+", default=None,
                        help=f"default: {' '.join(network_tuning.TUNERS)} (with --reach: bo "
                        f"{network_tuning.REFERENCE})")
    parser.add_argument("--top", type=int, default=15, help="kernels to print")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    return run_command("network_profile.py", profile, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
