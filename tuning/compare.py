"""Tuners side by side: the same workloads, budget and seeds, on the same machine in one run.

Each (workload, tuner, seed) tunes into its own database folder under `out/runs/`; a finished
one is read back instead of tuned again, so an interrupted comparison resumes where it stopped.
A finished (workload, seed) is also kept, without its databases, in `out/pairs/`: enough to
summarise it again, or to go on with more seeds elsewhere. Runs and pairs record the device
they were measured on (`device_name`): a comparison's runs share one device, so one measured on
another device (another GPU, CPU or RPC key) is never read back, finished or reported beside
them: that is one error, before anything is tuned.

The parts: `tuning.runs` (the runs and pairs on disk, the finalists' re-measurement),
`tuning.side_by_side` (several runs at once, on a GPU) and `tuning.report` (the figures).
"""

from __future__ import annotations

import os

from datagen.errors import UserError
from datagen.measure import device_name
from tuning.runs import (REMEASURE_ROUNDS, check_devices, model_ids, pair_file, read_pair,
                         run_pair, same_models, write_json)
from tuning.tuner import SearchInputs

# what a comparison measured, for its report: xz-compressed (the curves and re-measurements of
# every pair; a plain results.json of an earlier comparison is read where there is none)
RESULTS_FILE = "results.json.xz"


def run_curves(workloads, tuners: list[str], trials: int, seeds: list[int], out: str, target,
               measurer, inputs: SearchInputs, trials_per_iter: int, progress: bool = True,
               remeasure_budgets: list[int] | None = None,
               rounds: int = REMEASURE_ROUNDS,
               tuner_trials: dict[str, int] | None = None,
               finished_only: bool = False, jobs: int = 1) -> tuple[dict, dict]:
    """Tune, then re-measure the finalists; also writes `RESULTS_FILE`, which has besides
    what is returned each run's wall time ("wall_s": {workload key: {tuner: [seconds, one
    per seed, None where a pair made before this was recorded lacks it]}}).

    With `jobs` above 1, up to that many runs tune at once, each in a process of its own with
    a measurer like `measurer`, the pairs' runs in order, and each pair is re-measured as soon
    as its runs are finished (see the module doc; a run that fails there is tuned again here,
    alone).

    `tuner_trials` gives some tuners a smaller budget than `trials` (a tuner is re-measured
    only at the budgets it reached). Each finished (workload, seed) is kept in `pair_file` and
    read back from there if it covers the same tuners, budgets, rounds and models. With
    `finished_only`, nothing is tuned: only the pairs already there are read (a workload
    without any is left out), for a report of a comparison still under way; they are read
    whatever models they were made with, as long as all were made with the same ones
    (`RESULTS_FILE` names them under "models").

    Raises:
        UserError: with `finished_only`, pairs made with different models, or none.

    Returns:
        curves: {workload key: {tuner: [latencies per trial, one list per seed]}}
        remeasured: {workload key: {budget: {tuner: [re-measured latencies, one list per
            seed]}}}, the finalists at each of `remeasure_budgets` (default: `trials`) of the
            tuners that ran that far.
    """
    budgets = sorted(set(remeasure_budgets or [trials]))
    runs_to = {t: min(trials, (tuner_trials or {}).get(t, trials)) for t in tuners}
    results: dict = {w.key: {t: [] for t in tuners} for w in workloads}
    walls: dict = {w.key: {t: [] for t in tuners} for w in workloads}
    remeasured: dict = {w.key: {b: {t: [] for t in tuners if runs_to[t] >= b} for b in budgets}
                        for w in workloads}
    measured_on: dict = {w.key: [] for w in workloads}
    devices: dict = {w.key: [] for w in workloads}  # the device of each pair, None: unrecorded
    pair_seeds: dict = {w.key: [] for w in workloads}
    models = model_ids(inputs)
    made_with: dict[str, dict] = {}  # pair file -> the models it was made with
    # seed outermost: an interrupted benchmark leaves whole seeds behind
    order = [(seed, w) for seed in seeds for w in workloads]
    if not finished_only:
        check_devices(out, order, tuners, measurer.device)
    if jobs > 1 and not finished_only:
        waiting = [(seed, w) for seed, w in order
                   if read_pair(pair_file(out, w.key, seed), runs_to, budgets, rounds,
                                 models) is None]
        from tuning.side_by_side import pairs_side_by_side

        pairs_side_by_side(waiting, tuners, runs_to, budgets, out, target, measurer, inputs,
                            trials_per_iter, progress, rounds, models, jobs)
    for seed, w in order:
        path = pair_file(out, w.key, seed)
        pair = read_pair(path, runs_to, budgets, rounds, None if finished_only else models)
        if pair is None and finished_only:
            continue
        if finished_only:
            made_with[path] = pair.get("models")
        if pair is None:  # one after another (a run that failed side by side: here, alone)
            pair = run_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, inputs,
                             trials_per_iter, progress, rounds, models)
        for tuner in tuners:
            results[w.key][tuner].append(pair["curves"][tuner])
            walls[w.key][tuner].append((pair.get("wall_s") or {}).get(tuner))
        for b in budgets:
            for tuner in remeasured[w.key][b]:
                remeasured[w.key][b][tuner].append(pair["budgets"][str(b)][tuner])
        measured_on[w.key].append(pair["target"])
        devices[w.key].append(device_name(pair.get("device")))
        pair_seeds[w.key].append(seed)
    if not any(pair_seeds.values()):  # a report of nothing: `RESULTS_FILE` is left as it was
        raise UserError(f"no finished (workload, seed) pair of these tuners, budgets and rounds "
                        f"in {out}/pairs yet")
    for key in [k for k, seeds_done in pair_seeds.items() if not seeds_done]:
        del results[key], remeasured[key], measured_on[key], devices[key], pair_seeds[key], \
            walls[key]
    named = sorted({d for per_seed in devices.values() for d in per_seed if d is not None})
    if len(named) > 1:  # a report's pairs (tuning checked its own device before)
        raise UserError(f"the pairs in {out}/pairs were measured on different devices "
                        f"({', '.join(named)}): report the pairs of one device at a time (move "
                        "the others to another --out)")
    if made_with:
        first, *rest = made_with.items()
        other = next((path for path, ids in rest if not same_models(ids, first[1])), None)
        if other is not None:
            raise UserError(f"{first[0]} and {other} were made with different models: report "
                            "pairs of one model at a time (move the others to another --out)")
        models = first[1]
    write_json(os.path.join(out, RESULTS_FILE),
                {"trials": trials, "tuner_trials": runs_to, "seeds": seeds,
                 "pair_seeds": pair_seeds, "measured_on": measured_on, "devices": devices,
                 "models": models,
                 "curves": results, "remeasured": remeasured, "wall_s": walls})
    return results, remeasured
