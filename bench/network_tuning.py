"""Part `networks` of bench/tuning_vs_metaschedule.py: whole networks tuned end to end, the job
users have.

Each network of `NETWORKS` (outside every training suite: neither `data/llvm-networks`'s
sixteen networks nor the hand-written or generated tasks hold it; a CNN and a transformer) is
built from its definition (`datagen.networks`, random weights, its first input), exported
with `torch.export` and imported as `tune run --torch-model` imports a model
(`datagen.torch_import.relax_module`). Every tuner tunes all of its tasks with MetaSchedule's
task scheduler (`tuning.tuner.tune_network`, trials spread by task weight) at a total budget
of B trials per task, for each B of --network-budgets (default 16 and 64) and each seed, with
the builder and runner every tuner shares. A finished run keeps its database and a `done.json`
file (its trials and search wall time) under OUT/runs and is read back, so the part resumes
(the runs and pairs are cells of a `datagen.grid.Grid`, written whole).

When a (network, seed, budget)'s tuners have all run, each tuner's network is compiled with its
database (`compile_network`) and the compiled networks are measured interleaved, --rounds
rounds of A B C, B C A, C A B, ... (each one `time_evaluator` call of the relax VM, in a
worker process with the runner's threads: `datagen.measure.time_networks`; cells timed before
the order rotated, without `"order"`, ran A B C every round; such a cell, or one timed in fewer
rounds than asked, is timed again where its runs are on disk), and kept in
OUT/pairs/NETWORK__seedS__bB.json.xz (small, kept in git: a fresh clone summarises them
without tuning again). The summary (`summarize`), per network: each tuner's median latency
over seeds at each budget; bo's paired ratios to each baseline over (network, seed) pairs at
equal budgets (the median over rounds of the per-round ratio; wins, ties within 2% and losses;
the geometric mean with a paired bootstrap 95% interval); the smallest budget at which each
tuner's network is at least as fast as ms-default's at the largest budget; and each tuner's
search wall time per trial.

The runner times candidates hot (again and again on the same arguments), as every pair before
--cold was measured. With --cold, every tuner measures its candidates cold
(`datagen.defaults.COLD_PROTOCOL`: single runs, the CPU caches flushed of every argument but the
first, as a kernel meets its weights inside a network; what `tune run --torch-model` does on a
CPU by default) into OUT/tuning-networks-cold, and after each pair, where the same tuners' runs
tuned hot (the part without --cold) are on disk, the six networks are measured interleaved
(OUT/tuning-networks-cold/hot-vs-cold): the summary gives each tuner's network tuned cold over
tuned hot.

With --network-reach B, instead of the pairs: a race per (network, seed) of bo (each of
--network-ours) at the largest --network-budgets against ms-default at B trials per task (the
tuning issue's bo at 64 against ms-default at 256), their compiled networks measured
interleaved as a pair's are, kept in OUT/reach/NETWORK__seedS__bB1-vs-bB.json.xz. bo's run is
the pair's, read back where its run folder is still on disk. The summary gives per network the
geometric mean over seeds of bo's ratio to ms-default at B, reached where it is at most 1.
"""

from __future__ import annotations

import math
import os
import shutil
import time

import numpy as np

# a CNN and a transformer of the catalogue that no training suite holds (`datagen networks`)
NETWORKS = ("poolformer-s12", "electra-small")
BUDGETS = (16, 64)  # trials per task
TUNERS = ("bo", "ms-xgb-pretrained", "ms-default")
REFERENCE = "ms-default"  # whose latency at the largest budget the others race to
# rounds of the compiled networks' timing: about a second each (a third of one per network),
# so about half a minute in all, long enough that a few busy seconds on the host cannot hold
# most rounds
ROUNDS = 30
TIE = 0.02
BOOTSTRAP_SAMPLES = 10000


def check_networks(names: list[str], budgets: list[int], rounds: int,
                   reach: int | None = None) -> None:
    """Before anything is tuned: the networks are defined, each budget at least one round per
    task, the reference's budget to reach (if any) above them, the rounds positive.

    Raises:
        UserError: one line naming what is wrong.
    """
    from datagen.errors import UserError
    from datagen.networks import NETWORKS as DEFINED
    from tuning.tuner import DEFAULT_TRIALS_PER_ITER

    if unknown := [n for n in names if n not in DEFINED]:
        raise UserError(f"unknown network(s) {', '.join(unknown)}; see 'datagen networks'")
    if bad := [b for b in budgets if b < DEFAULT_TRIALS_PER_ITER]:
        raise UserError(f"--network-budgets are trials per task, at least one round of "
                        f"{DEFAULT_TRIALS_PER_ITER}, not {bad[0]}: a smaller budget leaves tasks "
                        "untuned")
    if reach is not None and reach <= max(budgets):
        raise UserError(f"--network-reach is {REFERENCE}'s budget for ours to reach, above the "
                        f"largest --network-budgets ({max(budgets)}), not {reach}")
    if rounds < 1:
        raise UserError(f"--rounds must be at least 1, not {rounds}")


def export(name: str, target):
    """Network `name` as the relax module `tune run --torch-model` tunes, and its input
    arrays (numpy), from its definition in `datagen.networks`."""
    import torch

    from datagen.networks import NETWORKS as DEFINED
    from datagen.torch_import import relax_module

    torch.manual_seed(0)
    network = DEFINED[name]
    model = network.build().eval()
    inputs = network.inputs[0][1]()
    with torch.no_grad():
        program = torch.export.export(model, inputs)
    return relax_module(program, target), [x.numpy() for x in inputs]


_EXPORTED: dict = {}  # network -> (relax module, input arrays, task count) of this process


def tune(mod, target, tuner: str, trials: int, grid, run: str, measurer, inputs) -> dict:
    """One tuner's run into the folder `run` of the part's `Grid` (read back from its cell
    `done.json` there if it finished with these trials and models): its trials, search wall
    time, models and device."""
    from tuning.runs import model_ids, models_used, same_models
    from tuning.tuner import tune_network

    models = models_used(tuner, model_ids(inputs))
    done = os.path.join(run, "done.json")
    made = grid.read(done)
    if made is not None and made.get("budget") == trials and \
            same_models(made.get("models"), models):
        return made
    shutil.rmtree(grid.path(run), ignore_errors=True)
    start = time.perf_counter()
    tune_network(mod, None, target, tuner, trials, grid.path(run), measurer, inputs)
    return grid.write(done, {"budget": trials, "wall_s": time.perf_counter() - start,
                             "models": models, "device": measurer.device})


def pair_cell(name: str, seed: int, per_task: int) -> str:
    """A finished (network, seed, budget) in the part's `Grid`: small, kept in git."""
    return os.path.join("pairs", f"{name}__seed{seed}__b{per_task}.json.xz")


def _network(name: str, target):
    """Network `name`'s relax module, input arrays and task count, exported once a process
    (whatever its seeds and budgets)."""
    from tuning.tuner import task_count

    if name not in _EXPORTED:
        mod, arrays = export(name, target)
        _EXPORTED[name] = mod, arrays, task_count(mod, target)
    return _EXPORTED[name]


def _race(cell: str, fields: dict, name: str, seed: int, entrants: dict, grid, target,
          measurer, search_inputs, rounds: int) -> dict:
    """The cell `cell` of `grid`: each entrant (label -> (tuner, trials per task)) tunes
    network `name` (or is read back from its run folder, shared by every cell that runs that
    tuner at that budget), then their compiled networks are measured interleaved, kept with
    `fields`; read back instead if it finished with these entrants and rounds."""
    import dataclasses

    made = grid.read(cell)
    folders = {label: os.path.join("runs", name, tuner, f"seed{seed}-b{per_task}")
               for label, (tuner, per_task) in entrants.items()}
    # a cell without "threads" timed its networks with the TVM runtime's default threads in
    # this process (half the cores of an x86 host), not the runner's: timed again (tuned
    # again where its runs are gone). One timed in fewer rounds or in a fixed order (without
    # "order") is timed again where its runs are on disk, its earlier timing kept beside, and
    # kept as it is where they are gone.
    earlier = {}
    if made is not None and set(made["latency"]) == set(entrants) \
            and made.get("threads") == measurer.num_threads:
        order = made.get("order", "fixed")
        if made["rounds"] >= rounds and order == "rotated":
            return made
        if not all(grid.read(os.path.join(f, "done.json")) is not None
                   for f in folders.values()):
            print(f"kept {cell} as timed before ({made['rounds']} rounds, {order} order): its "
                  "runs are not on disk to time again")
            return made
        earlier = {"earlier": {"rounds": made["rounds"], "order": order,
                               "latency": made["latency"]}}
    mod, _, tasks = _network(name, target)
    runs = {label: tune(mod, target, tuner, per_task * tasks, grid, folders[label], measurer,
                        dataclasses.replace(search_inputs, seed=seed))
            for label, (tuner, per_task) in entrants.items()}
    return grid.write(cell, {
        "network": name, "seed": seed, **fields, "tasks": tasks, "runs": runs, "rounds": rounds,
        "threads": measurer.num_threads, "order": "rotated", "protocol": measurer.protocol,
        "latency": _time_runs(name, {label: grid.path(f) for label, f in folders.items()},
                              target, measurer, rounds), **earlier})


def _time_runs(name: str, runs: dict, target, measurer, rounds: int) -> dict:
    """Network `name` compiled with each run's database (label -> run folder) and the compiled
    networks measured interleaved: label -> seconds per round."""
    from tvm.s_tir import meta_schedule as ms

    from datagen.measure import time_networks
    from tuning.tuner import compile_network

    mod, arrays, _ = _network(name, target)
    executables = {label: compile_network(ms.database.JSONDatabase(work_dir=path), mod, target)
                   for label, path in runs.items()}
    return time_networks(executables, arrays, target, rounds, num_threads=measurer.num_threads)


def run_pair(name: str, seed: int, per_task: int, tuners, grid, target, measurer,
             search_inputs, rounds: int) -> dict:
    """The pair of (network, seed, budget): every tuner's run, then their compiled networks
    measured interleaved; read back from its cell of `grid` if it finished with these
    tuners."""
    return _race(pair_cell(name, seed, per_task), {"per_task": per_task}, name, seed,
                 {t: (t, per_task) for t in tuners}, grid, target, measurer, search_inputs,
                 rounds)


def reach_cell(name: str, seed: int, per_task: int, reach: int) -> str:
    """A finished race of ours at `per_task` against the reference at `reach` trials per task."""
    return os.path.join("reach", f"{name}__seed{seed}__b{per_task}-vs-b{reach}.json.xz")


def run_reach(name: str, seed: int, per_task: int, reach: int, ours, grid, target, measurer,
              search_inputs, rounds: int) -> dict:
    """Each of `ours` at `per_task` trials per task against the reference at `reach`
    (latencies under the tuner's name and `REFERENCE@reach`), measured interleaved; read back
    from its cell if it finished with these tuners. Ours' runs are the pairs' runs at that
    budget where they are still on disk."""
    entrants = {o: (o, per_task) for o in ours} | {f"{REFERENCE}@{reach}": (REFERENCE, reach)}
    return _race(reach_cell(name, seed, per_task, reach),
                 {"per_task": per_task, "reference_per_task": reach}, name, seed, entrants,
                 grid, target, measurer, search_inputs, rounds)


def hot_vs_cold_cell(name: str, seed: int, per_task: int) -> str:
    """A finished timing of each tuner's network tuned hot and tuned cold (the --cold part)."""
    return os.path.join("hot-vs-cold", f"{name}__seed{seed}__b{per_task}.json.xz")


def run_hot_vs_cold(name: str, seed: int, per_task: int, tuners, grid, hot_grid, target,
                    measurer, rounds: int) -> dict | None:
    """Each tuner's network as tuned cold (this part's run) and as tuned hot (the same tuner,
    seed and budget in `hot_grid`, the part without --cold), all compiled and measured
    interleaved, under `TUNER` and `TUNER@hot`; read back from its cell if it finished with
    these tuners and rounds. None where a run of either is not on disk."""
    cell = hot_vs_cold_cell(name, seed, per_task)
    labels = {t: (grid, t) for t in tuners} | {f"{t}@hot": (hot_grid, t) for t in tuners}
    made = grid.read(cell)
    if made is not None and set(made["latency"]) == set(labels) and made["rounds"] >= rounds:
        return made
    folders = {label: os.path.join("runs", name, tuner, f"seed{seed}-b{per_task}")
               for label, (_, tuner) in labels.items()}
    runs = {label: g.read(os.path.join(folders[label], "done.json"))
            for label, (g, _) in labels.items()}
    if any(r is None for r in runs.values()):
        return None
    return grid.write(cell, {
        "network": name, "seed": seed, "per_task": per_task, "tasks": _network(name, target)[2],
        "runs": runs, "rounds": rounds, "threads": measurer.num_threads, "order": "rotated",
        "latency": _time_runs(name, {label: g.path(folders[label])
                                     for label, (g, _) in labels.items()},
                              target, measurer, rounds)})


def summarize_hot_vs_cold(cells: list[dict], tuners) -> list[dict]:
    """Per tuner and budget: over the (network, seed) cells, the median over rounds of the
    per-round ratio of its network tuned cold to the one tuned hot, and their geometric mean
    (below 1: measuring cold made its network faster)."""
    from tuning.report import geomean

    out = []
    for per_task in sorted({c["per_task"] for c in cells}):
        at = [c for c in cells if c["per_task"] == per_task]
        for tuner in tuners:
            mine = [c for c in at if tuner in c["latency"]]
            if mine:
                ratios = [cell_ratio(c, tuner, f"{tuner}@hot") for c in mine]
                out.append({"tuner": tuner, "per_task": per_task,
                            "cells": [f"{c['network']} seed {c['seed']}" for c in mine],
                            "ratios": ratios, "geomean_ratio": geomean(ratios)})
    return out


def cell_ratio(cell: dict, ours: str, base: str) -> float:
    """The median over a finished cell's rounds of the per-round ratio of `ours`' network
    latency to `base`'s."""
    return float(np.median(np.asarray(cell["latency"][ours]) / np.asarray(cell["latency"][base])))


def paired(pairs: list[dict], ours: str, base: str, per_task: int, seed: int = 0) -> dict:
    """`ours` against `base` over the (network, seed) pairs at one budget: per pair the median
    of the per-round latency ratios, wins / ties / losses, and their geometric mean with a
    paired bootstrap 95% interval (pairs resampled)."""
    from tuning.report import geomean

    used = [p for p in pairs if p["per_task"] == per_task
            and ours in p["latency"] and base in p["latency"]]
    ratios = [cell_ratio(p, ours, base) for p in used]
    if not ratios:
        return {}
    rng = np.random.default_rng(seed)
    logs = np.log(ratios)
    boot = np.exp(rng.choice(logs, (BOOTSTRAP_SAMPLES, len(logs))).mean(axis=1))
    return {"ours": ours, "baseline": base, "per_task": per_task, "n": len(ratios),
            "ratios": ratios, "geomean_ratio": geomean(ratios),
            "ci95": [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))],
            "wins": sum(r < 1 - TIE for r in ratios), "losses": sum(r > 1 + TIE for r in ratios),
            "ties": sum(abs(r - 1) <= TIE for r in ratios),
            # pairs whose networks were timed with the runner's threads (the others: with the
            # TVM runtime's default in the bench's process, one thread on a 2-core host)
            "runner_threads": sum("threads" in p for p in used)}


def _median_us(pairs: list[dict], tuner: str, per_task: int) -> float | None:
    """The median over `pairs` at budget `per_task` of `tuner`'s median latency (us); None
    where none of them ran it."""
    at = [float(np.median(p["latency"][tuner])) for p in pairs
          if p["per_task"] == per_task and tuner in p["latency"]]
    return float(np.median(at)) * 1e6 if at else None


def versus(tuners, ours) -> list[tuple[str, str]]:
    """The (ours, baseline) comparisons: each of `ours` against every other tuner but an
    `ours` listed before it."""
    return [(o, base) for i, o in enumerate(ours) for base in tuners
            if base != o and base not in ours[:i]]


def summarize(pairs: list[dict], tuners, ours=("bo",)) -> dict:
    """Per network: each tuner's median latency (us) over seeds per budget, the smallest
    budget at which it is as fast as the reference at the largest (None: at none; both
    medians over the seeds that ran at every budget, `reach_seeds`), its
    search wall time per trial, and each of `ours`' paired ratio to it on that network
    (`bo_ratio@B` for bo, the geometric mean over seeds); over networks, the paired ratios of
    each of `ours` to the other tuners (`versus`)."""
    out: dict = {"networks": {}, "paired": []}
    budgets = sorted({p["per_task"] for p in pairs})
    for name in sorted({p["network"] for p in pairs}):
        mine = [p for p in pairs if p["network"] == name]
        rows = {}
        for tuner in tuners:
            row = {"tasks": mine[0]["tasks"]}
            for b in budgets:
                if (us := _median_us(mine, tuner, b)) is not None:
                    row[f"latency_us@{b}"] = us
            walls = [p["runs"][tuner]["wall_s"] / p["runs"][tuner]["budget"] for p in mine
                     if tuner in p["runs"]]
            row["wall_s_per_trial"] = float(np.median(walls)) if walls else math.nan
            rows[tuner] = row
        for o, base in versus(tuners, ours):
            for b in budgets:  # the paired ratio on this network alone
                if stats := paired(mine, o, base, b):
                    rows[base][f"{o}_ratio@{b}"] = stats["geomean_ratio"]
        # reach on the seeds that ran at every budget alone, so no budget's median mixes in
        # seeds another budget lacks
        seeds = set.intersection(*({p["seed"] for p in mine if p["per_task"] == b}
                                   for b in budgets))
        common = [p for p in mine if p["seed"] in seeds]
        level = _median_us(common, REFERENCE, budgets[-1])
        for tuner, row in rows.items():
            row["reaches_reference_at"] = None if level is None else next(
                (b for b in budgets
                 if (_median_us(common, tuner, b) or math.inf) <= level), None)
            row["reach_seeds"] = sorted(seeds)
        out["networks"][name] = rows
    for o, base in versus(tuners, ours):
        for b in budgets:
            if stats := paired(pairs, o, base, b):
                out["paired"].append(stats)
    return out


def summarize_reach(cells: list[dict]) -> list[dict]:
    """Per network, budget pair and each of ours: per seed the median over rounds of the
    per-round ratio of ours to the reference at its larger budget, their geometric mean, and
    whether ours reached it (the mean at most 1)."""
    from tuning.report import geomean

    def race(c: dict) -> tuple:
        return c["network"], c["per_task"], c["reference_per_task"]

    out = []
    for name, per_task, reach in sorted({race(c) for c in cells}):
        at = sorted((c for c in cells if race(c) == (name, per_task, reach)),
                    key=lambda c: c["seed"])
        ref = f"{REFERENCE}@{reach}"
        for o in sorted({k for c in at for k in c["latency"] if k != ref}):
            seeds = [c for c in at if o in c["latency"]]
            ratios = [cell_ratio(c, o, ref) for c in seeds]
            mean = geomean(ratios)
            out.append({"network": name, "ours": o, "per_task": per_task,
                        "reference": REFERENCE, "reference_per_task": reach,
                        "seeds": [c["seed"] for c in seeds], "ratios": ratios,
                        "geomean_ratio": mean, "reached": mean <= 1.0,
                        "runner_threads": sum("threads" in c for c in seeds)})
    return out


def format_summary(summary: dict) -> str:
    """The summary as text: a table per network, then the paired ratios."""
    lines = []
    for name, rows in summary["networks"].items():
        budgets = sorted(int(k.split("@")[1]) for k in next(iter(rows.values()))
                         if k.startswith("latency_us@"))
        lines.append(f"-- {name} ({next(iter(rows.values()))['tasks']} tasks): network "
                     "latency (us, median over seeds) at trials per task --")
        lines.append(f"{'tuner':<20}" + "".join(f"{f'@{b}':>12}" for b in budgets)
                     + f"{'reaches ' + REFERENCE + ' at':>24}{'wall s/trial':>14}")
        for tuner, row in rows.items():
            cells = "".join(f"{row.get(f'latency_us@{b}', math.nan):>12.1f}" for b in budgets)
            reach = row["reaches_reference_at"]
            lines.append(f"{tuner:<20}{cells}{'never' if reach is None else f'@{reach}':>24}"
                         f"{row['wall_s_per_trial']:>14.2f}")
    for p in summary["paired"]:
        lines.append(f"{p['ours']} / {p['baseline']} at {p['per_task']} trials per task: ratio "
                     f"{p['geomean_ratio']:.3f} (95% interval {p['ci95'][0]:.3f}-"
                     f"{p['ci95'][1]:.3f}) over {p['n']} pair(s); {p['wins']} wins, "
                     f"{p['ties']} ties, {p['losses']} losses" + _threads_note(p))
    for r in summary.get("hot_vs_cold", []):
        each = ", ".join(f"{c} {x:.3f}" for c, x in zip(r["cells"], r["ratios"]))
        lines.append(f"{r['tuner']} tuned cold / tuned hot at {r['per_task']} trials per task: "
                     f"network latency ratio {r['geomean_ratio']:.3f} ({each})")
    for r in summary.get("reach", []):
        seeds = ", ".join(f"seed {s} {x:.3f}" for s, x in zip(r["seeds"], r["ratios"]))
        verdict = "reached" if r["reached"] else \
            f"not reached ({100 * (r['geomean_ratio'] - 1):.1f}% slower)"
        lines.append(f"{r['network']}: {r['ours']} at {r['per_task']} trials per task / "
                     f"{r['reference']} at {r['reference_per_task']}: ratio "
                     f"{r['geomean_ratio']:.3f} ({seeds}): {verdict}" + _threads_note(r))
    return "\n".join(lines)


def _threads_note(stats: dict) -> str:
    """How many of a summary row's cells timed their networks with the runner's threads, where
    not all: the others with the TVM runtime's default in the bench's own process."""
    n, timed = len(stats["ratios"]), stats.get("runner_threads", 0)
    return "" if timed == n else f" [{timed} of {n} timed with the runner's threads]"


def _finished(grid, folder: str) -> list[dict]:
    """The finished cells in `folder` of the part's `Grid`, by name."""
    path = grid.path(folder)
    return [grid.read(os.path.join(folder, f)) for f in sorted(os.listdir(path))] \
        if os.path.isdir(path) else []


def networks_part(args, target, measurer) -> dict:
    """Tune (or read back) every (network, seed, budget) pair, or with --network-reach every
    race of ours against the reference at that budget, then summarise every pair and race
    finished in the folder; writes OUT/tuning-networks/summary.json (with --cold, every tuner
    measuring cold: OUT/tuning-networks-cold)."""
    from datagen.errors import UserError
    from datagen.grid import Grid, write_json
    from tuning.tuner import SearchInputs, load_predictor

    out = os.path.join(args.out, "tuning-networks" + ("-cold" if args.cold else ""))
    grid = Grid(out)
    tuners = list(args.network_tuners)
    if not args.report:
        from costmodel.pretrained_xgb import pretrained_xgb_file

        predictor = load_predictor(None)  # tune's default for this target, as tune run loads it
        xgb = pretrained_xgb_file(predictor.members[0].path, predictor.meta,
                                  os.path.join(out, "cache"))
        inputs = SearchInputs(predictor, pretrained_xgb=xgb)
        for name in args.networks:
            for seed in args.seeds:
                if args.network_reach:
                    run_reach(name, seed, max(args.network_budgets), args.network_reach,
                              args.network_ours, grid, target, measurer, inputs, args.rounds)
                else:
                    for budget in args.network_budgets:
                        run_pair(name, seed, budget, tuners, grid, target, measurer, inputs,
                                 args.rounds)
                        if args.cold:
                            hot = Grid(os.path.join(args.out, "tuning-networks"))
                            run_hot_vs_cold(name, seed, budget, tuners, grid, hot, target,
                                            measurer, args.rounds)
    # the summary of every pair and race finished in the folder, these and earlier runs'
    pairs, reach = _finished(grid, "pairs"), _finished(grid, "reach")
    if not pairs and not reach:
        raise UserError(f"no finished (network, seed, budget) in {out}/pairs yet")
    summary = summarize(pairs, tuners, args.network_ours) if pairs else \
        {"networks": {}, "paired": []}
    if reach:
        summary["reach"] = summarize_reach(reach)
    if hot_vs_cold := _finished(grid, "hot-vs-cold"):
        summary["hot_vs_cold"] = summarize_hot_vs_cold(hot_vs_cold, tuners)
    write_json(os.path.join(out, "summary.json"), summary, indent=1)
    cells = pairs + reach
    rounds = sorted({c["rounds"] for c in cells})
    print(f"== networks: {', '.join(sorted({c['network'] for c in cells}))}, seeds "
          f"{sorted({c['seed'] for c in cells})}, "
          f"{rounds[0] if len(rounds) == 1 else f'{rounds[0]}-{rounds[-1]}'} interleaved rounds ==")
    print(format_summary(summary))
    return summary
