"""Benchmark: where each tuner's network spends its time, kernel by kernel, against what the
tuner measured of each task alone.

Every tuner of part `networks` (bench/network_tuning.py) optimises each task timed alone by
MetaSchedule's runner (its own inputs, hot in cache, many repeats), while the figure is the
whole compiled network. This compiles the networks of one finished (network, seed, budget)
from the databases that part keeps (OUT/tuning-networks/runs), runs each --rounds times,
interleaved, with the relax VM's instrument timing every call, and prints per kernel: its calls
per inference and, per tuner, the in-run best of its task times those calls (alone) beside
its summed time in the network (the median over rounds); then per tuner the totals of both, the
VM's other calls and the whole instrumented inference. The instrument is a Python callback
around every call, so the inference is slower than part `networks` measures it (its figure is
in the pair file); kernels are timed on their own, between the callbacks.

With --alone, each tuner's best schedule of every task is also built and timed alone again on
this host, with the tuning protocol (hot: MetaSchedule's runner repeats it, its arguments in
cache) and with the caches flushed of every argument but the first before each of 10 single
runs (cold: its weights out of the caches; `datagen.measure`'s `cache_flush`),
the tuners interleaved --alone-rounds times: which of the two orders the tuners as the network
does.

    python bench/network_profile.py electra-small --seed 0 --budget 16 [--rounds 10] [--alone] [--out bench/results]

Writes OUT/tuning-networks/profiles/NETWORK__seedS__bB.json.xz.
"""

from __future__ import annotations

import argparse
import os
import sys
import time

import numpy as np

import network_tuning  # a sibling script

BUILTIN = "vm.builtin."  # the VM's own calls (allocation, shape checks, ...), not kernels
# timed alone, cold: single runs, the caches flushed of every argument but the first before each
COLD = {"number": 1, "repeat": 10, "min_repeat_ms": 0, "cache_flush": True}


def in_run_bests(database, tasks, target) -> dict[str, float | None]:
    """Each task's best latency in its tuner's run (seconds; None: no successful record)."""
    from datagen.measure import run_latency

    bests = {}
    for task in tasks:
        record = database.query_tuning_record(task.dispatched[0], target, task.task_name)
        bests[task.task_name] = None if record is None else run_latency(record.run_secs)
    return bests


def timed_alone(databases: dict, tasks, target, rounds: int) -> dict:
    """Per protocol (hot: the tuning protocol; cold: `COLD`), per tuner and task: the median
    over `rounds` interleaved measurements of its best schedule's latency alone (seconds;
    None: no record, or it failed)."""
    from datagen.measure import Measurer, run_latency

    cells, mods = [], []
    for tuner, database in databases.items():
        for task in tasks:
            sch = database.query_schedule(task.dispatched[0], target, task.task_name)
            if sch is not None:
                cells.append((tuner, task.task_name))
                mods.append(sch.mod)
    out: dict = {}
    for name, protocol in (("hot", None), ("cold", COLD)):
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
    untimed inference each."""
    import tvm
    from tvm import relax
    from tvm.runtime.vm import VMInstrumentReturnKind

    dev = tvm.device("cpu" if target.kind.name == "llvm" else target.kind.name, 0)
    args = [tvm.runtime.tensor(a, dev) for a in arrays]
    spent: dict[str, float] = {}
    calls: dict[str, int] = {}
    stack: list[float] = []

    def instrument(func, symbol, before_run, ret_value, *call_args):
        if before_run:
            stack.append(time.perf_counter())
        else:
            spent[symbol] = spent.get(symbol, 0.0) + time.perf_counter() - stack.pop()
            calls[symbol] = calls.get(symbol, 0) + 1
        return VMInstrumentReturnKind.NO_OP

    vms = {}
    for tuner, exe in executables.items():
        vms[tuner] = relax.VirtualMachine(exe, dev)
        vms[tuner].set_instrument(instrument)
        vms[tuner]["main"](*args)
    out: dict = {t: [] for t in executables}
    for _ in range(rounds):
        for tuner, vm in vms.items():
            spent.clear()
            calls.clear()
            start = time.perf_counter()
            vm["main"](*args)
            dev.sync()
            out[tuner].append({"total_s": time.perf_counter() - start, "spent_s": dict(spent),
                               "calls": dict(calls)})
    return out


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
    target = make_target(None)
    grid = Grid(os.path.join(args.out, "tuning-networks"))
    runs = {t: os.path.join("runs", args.network, t, f"seed{args.seed}-b{args.budget}")
            for t in args.tuners}
    if missing := [t for t, run in runs.items()
                   if grid.read(os.path.join(run, "done.json")) is None]:
        raise UserError(f"no finished run of {', '.join(missing)} for {args.network} seed "
                        f"{args.seed} at {args.budget} trials per task in {grid.path('runs')}; "
                        "run part `networks` of bench/tuning_vs_metaschedule.py first")
    mod, arrays = network_tuning.export(args.network, target)
    tasks = ms.relax_integration.extract_tasks(mod, target)
    databases = {t: ms.database.JSONDatabase(work_dir=grid.path(run)) for t, run in runs.items()}
    bests = {t: in_run_bests(db, tasks, target) for t, db in databases.items()}
    executables = {t: compile_network(db, mod, target) for t, db in databases.items()}
    calls = timed_calls(executables, arrays, target, args.rounds)
    again = timed_alone(databases, tasks, target, args.alone_rounds) if args.alone else None
    summary = summarize(calls, bests, again)
    pair = grid.read(network_tuning.pair_cell(args.network, args.seed, args.budget))
    summary.update(network=args.network, seed=args.seed, per_task=args.budget,
                   rounds=args.rounds, alone_rounds=args.alone_rounds if args.alone else 0,
                   pair_latency_s=None if pair is None else {
                       t: float(np.median(v)) for t, v in pair["latency"].items()})
    grid.write(os.path.join("profiles", f"{args.network}__seed{args.seed}__b{args.budget}"
                            ".json.xz"), summary)
    print(format_profile(summary, args.tuners, args.top))
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
    parser.add_argument("--tuners", nargs="+", default=list(network_tuning.TUNERS))
    parser.add_argument("--top", type=int, default=15, help="kernels to print")
    parser.add_argument("--out", default=os.path.join(os.path.dirname(__file__), "results"))
    return run_command("network_profile.py", profile, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
