"""Tuners side by side: the same workloads, budget and seeds, on the same machine in one run.

Each (workload, tuner, seed) tunes into its own database folder under `out/runs/`; a finished
one is read back instead of tuned again, so an interrupted comparison resumes where it stopped.
A finished (workload, seed) is also kept, without its databases, in `out/pairs/`: enough to
summarise it again, or to go on with more seeds elsewhere. Runs and pairs record the device
they were measured on (`device_name`): a comparison's runs share one device, so one measured on
another device (another GPU, CPU or RPC key) is never read back, finished or reported beside
them: that is one error, before anything is tuned.

Best-so-far over noisy measurements favours the tuner that drew the luckiest outlier, so after
all tuners of a (workload, seed) have run, each tuner's best schedule at each compared budget
(its finalist) is built again and re-measured together with the others, interleaved (A B C,
A B C, ...), `rounds` times; tuners are compared on these re-measured latencies. The in-run
curves give the trials-to-reach figures.

The summary gives, per workload and as a geometric mean over workloads, the best in-run latency
at each budget and the trials to reach the reference's final latency, and, per pair of tuners
(ours against each baseline), paired statistics over the (workload, seed) pairs: the
re-measured latency ratio per pair, wins, ties (within 2%) and losses, the geometric-mean ratio
with a paired bootstrap 95% interval, and the trials to reach the baseline's final latency.
`curves.png` plots the best latency against trials.

On a GPU several runs can tune at once, each in a process of its own (`jobs`): the tuners of
a (workload, seed), and as runs end those of the next pairs, in order. They search and build
side by side on the host's cores while their measurements take turns on the device
(`datagen.measure.Measurer`'s `device_lock`), each measuring process on the last core. Each
process searches and builds on a slice of the other cores of its own, the same number for every
run (`core_slices`), and uses that many threads (MetaSchedule's search, the builder, XGBoost,
torch): unpinned, the processes each start a thread per core and crowd each other out. The
tuners still see the same builder, runner, budget and protocol; only the wall time changes. As
soon as a pair's runs are all finished, its finalists are re-measured in this process, on the
last core and holding the device: no other program runs on it meanwhile, while other runs may
go on searching and building on the other cores.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil

import numpy as np

from datagen.errors import UserError
from datagen.measure import device_name
from tuning.tuner import RECORDS_FILE, SearchInputs, best_so_far, read_curve, tune_workload

REFERENCE = "ms-default"
OURS = ("bo", "ms-ours")  # the tuners whose ratios to every other tuner are reported
REMEASURE_ROUNDS = 10
TIE = 0.02  # a ratio within 2% of 1 is a tie
BOOTSTRAP_SAMPLES = 10000


def run_dir(out: str, workload_key: str, tuner: str, seed: int) -> str:
    return os.path.join(out, "runs", workload_key.replace("/", "__"), tuner, f"seed{seed}")


def pair_file(out: str, workload_key: str, seed: int) -> str:
    """A finished (workload, seed): every tuner's curve, finalists and re-measurements, small
    enough to keep under version control, so a comparison resumes without its databases."""
    return os.path.join(out, "pairs", f"{workload_key.replace('/', '__')}__seed{seed}.json")


def run_curves(workloads, tuners: list[str], trials: int, seeds: list[int], out: str, target,
               measurer, inputs: SearchInputs, trials_per_iter: int, progress: bool = True,
               remeasure_budgets: list[int] | None = None,
               rounds: int = REMEASURE_ROUNDS,
               tuner_trials: dict[str, int] | None = None,
               finished_only: bool = False, jobs: int = 1) -> tuple[dict, dict]:
    """Tune, then re-measure the finalists; also writes results.json.

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
    (results.json names them under "models").

    Raises:
        UserError: with `finished_only`, pairs made with different models.

    Returns:
        curves: {workload key: {tuner: [latencies per trial, one list per seed]}}
        remeasured: {workload key: {budget: {tuner: [re-measured latencies, one list per
            seed]}}}, the finalists at each of `remeasure_budgets` (default: `trials`) of the
            tuners that ran that far.
    """
    budgets = sorted(set(remeasure_budgets or [trials]))
    runs_to = {t: min(trials, (tuner_trials or {}).get(t, trials)) for t in tuners}
    results: dict = {w.key: {t: [] for t in tuners} for w in workloads}
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
        _check_devices(out, order, tuners, measurer.device)
    if jobs > 1 and not finished_only:
        waiting = [(seed, w) for seed, w in order
                   if _read_pair(pair_file(out, w.key, seed), runs_to, budgets, rounds,
                                 models) is None]
        _pairs_side_by_side(waiting, tuners, runs_to, budgets, out, target, measurer, inputs,
                            trials_per_iter, progress, rounds, models, jobs)
    for seed, w in order:
        path = pair_file(out, w.key, seed)
        pair = _read_pair(path, runs_to, budgets, rounds, None if finished_only else models)
        if pair is None and finished_only:
            continue
        if finished_only:
            made_with[path] = pair.get("models")
        if pair is None:  # one after another (a run that failed side by side: here, alone)
            pair = _run_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, inputs,
                             trials_per_iter, progress, rounds, models)
        for tuner in tuners:
            results[w.key][tuner].append(pair["curves"][tuner])
        for b in budgets:
            for tuner in remeasured[w.key][b]:
                remeasured[w.key][b][tuner].append(pair["budgets"][str(b)][tuner])
        measured_on[w.key].append(pair["target"])
        devices[w.key].append(device_name(pair.get("device")))
        pair_seeds[w.key].append(seed)
    for key in [k for k, seeds_done in pair_seeds.items() if not seeds_done]:
        del results[key], remeasured[key], measured_on[key], devices[key], pair_seeds[key]
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
    _write_json(os.path.join(out, "results.json"),
                {"trials": trials, "tuner_trials": runs_to, "seeds": seeds,
                 "pair_seeds": pair_seeds, "measured_on": measured_on, "devices": devices,
                 "models": models,
                 "curves": results, "remeasured": remeasured})
    return results, remeasured


def same_models(a: dict | None, b: dict | None) -> bool:
    """Whether two `model_ids` name the same models: by content (SHA-256), whatever the files
    were called (a pretrained XGBModel read from its cache, then from beside its checkpoint)."""
    def digests(ids):
        return {kind: [m["sha256"] for m in (v if isinstance(v, list) else [v])]
                for kind, v in (ids or {}).items()}
    return digests(a) == digests(b)


def model_ids(inputs: SearchInputs) -> dict:
    """The models the tuners search with (file names and SHA-256): a pair run with other
    models is not read back."""
    def ident(path):
        with open(path, "rb") as f:
            digest = hashlib.sha256(f.read()).hexdigest()
        return {"file": os.path.basename(path), "sha256": digest}

    ids = {}
    if inputs.predictor is not None:
        ids["checkpoints"] = [ident(p) for p in inputs.predictor.files]  # and any companion
    if inputs.pretrained_xgb:
        ids["pretrained_xgb"] = ident(inputs.pretrained_xgb)
    return ids


def _check_devices(out: str, order, tuners: list[str], device: dict) -> None:
    """Before anything is tuned: the finished runs and pairs of `order` ((seed, workload))
    under `out` were measured on `device`, where they say what they were measured on."""
    here = device_name(device)
    for seed, w in order:
        done = [os.path.join(run_dir(out, w.key, t, seed), "done") for t in tuners]
        for path in [*done, pair_file(out, w.key, seed)]:
            try:
                with open(path) as f:
                    made = json.load(f)
            except (OSError, ValueError):
                continue
            there = device_name(made.get("device") if isinstance(made, dict) else None)
            if here is not None and there is not None and there != here:
                raise UserError(f"{path} was measured on {there} and this host measures on "
                                f"{here}: a comparison's runs share one device; tune into "
                                "another --out")


def _read_pair(path: str, runs_to: dict[str, int], budgets: list[int], rounds: int,
               models: dict | None):
    """A finished pair of these tuners, budgets, rounds and models (None: any models)."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        pair = json.load(f)
    same = pair.get("rounds") == rounds and pair.get("tuner_trials") == runs_to and \
        (models is None or same_models(pair.get("models"), models)) and \
        all(str(b) in pair["budgets"] for b in budgets)
    return pair if same else None


def _write_json(path: str, data: dict) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(f"{path}.tmp", "w") as f:
        json.dump(data, f)
    os.replace(f"{path}.tmp", path)


def _models_used(tuner: str, models: dict) -> dict:
    """The part of `models` that `tuner` searches with (a run tuned with others is redone)."""
    from tuning.tuner import TUNERS

    spec = TUNERS.get(tuner)
    return {k: v for k, v in models.items()
            if (k == "checkpoints" and spec.needs_checkpoint) or
            (k == "pretrained_xgb" and spec.needs_pretrained_xgb)}


def _tune_run(mod, target, tuner, trials, wd, measurer, inputs, trials_per_iter, progress,
              desc, uses) -> None:
    """One tuner's run into `wd`, from scratch, marked done when it finished."""
    shutil.rmtree(wd, ignore_errors=True)
    tune_workload(mod, target, tuner, trials, wd, measurer, inputs, trials_per_iter,
                  progress=progress, desc=desc)
    _write_json(os.path.join(wd, "done"), {"trials": len(_finished(wd, 0) or []),
                                           "models": uses, "threads": inputs.threads,
                                           "device": measurer.device})


def _run_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, inputs,
              trials_per_iter, progress, rounds, models) -> dict:
    """Tune the pair's unfinished runs here, one after another, then `_finish_pair`."""
    dirs = {t: run_dir(out, w.key, t, seed) for t in tuners}
    uses = {t: _models_used(t, models) for t in tuners}
    inputs = dataclasses.replace(inputs, seed=seed)
    for tuner in tuners:
        if _finished(dirs[tuner], runs_to[tuner], uses[tuner]) is None:
            _tune_run(w.mod, target, tuner, runs_to[tuner], dirs[tuner], measurer, inputs,
                      trials_per_iter, progress, f"{w.key} {tuner} s{seed}", uses[tuner])
    return _finish_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, rounds, models)


def _finish_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, rounds,
                 models) -> dict:
    """A pair whose runs are finished: its curves and re-measured finalists, written to its
    `pair_file`."""
    dirs = {t: run_dir(out, w.key, t, seed) for t in tuners}
    curves = {t: _finished(dirs[t], 0) or [] for t in tuners}
    pair = remeasure_finalists(w, dirs, runs_to, budgets, target, measurer, rounds)
    pair.update(curves=curves, tuner_trials=runs_to, target=str(target), models=models,
                device=measurer.device)
    _write_json(pair_file(out, w.key, seed), pair)
    return pair


def _pairs_side_by_side(pairs, tuners, runs_to, budgets, out, target, measurer, inputs,
                        trials_per_iter, progress, rounds, models, jobs) -> None:
    """Tune the unfinished runs of `pairs` ((seed, workload), in order) in up to `jobs`
    processes at once, and finish each pair (`_finish_pair`) as soon as its runs are: here, on
    the last core, holding the device lock (see the module doc). A pair with a run that failed
    in its process is left for `_run_pair`."""
    import fcntl
    import tempfile

    from datagen.errors import UserError
    from datagen.measure import Measurer

    if measurer.tracker is not None:
        raise UserError("tuners side by side take turns on this host's device; through an RPC "
                        "tracker, tune them one after another (jobs 1)")
    if not pairs:
        return
    uses = {t: _models_used(t, models) for t in tuners}
    runs, left = [], {}  # the runs to tune; per pair, how many of its runs are still to end
    for seed, w in pairs:
        mine = [t for t in tuners
                if _finished(run_dir(out, w.key, t, seed), runs_to[t], uses[t]) is None]
        left[(seed, w.key)] = len(mine)
        runs += [{"workload": w, "seed": seed, "tuner": t, "trials": runs_to[t],
                  "work_dir": run_dir(out, w.key, t, seed), "uses": uses[t]} for t in mine]
    cpus = sorted(os.sched_getaffinity(0))
    with tempfile.TemporaryDirectory(prefix="tuning-device-lock-") as tmp:
        lock = os.path.join(tmp, "lock")
        # a pair's finalists only: as many build workers (each imports TVM as it starts)
        remeasurer = Measurer(target, **measurer.settings,
                              build_workers=min(len(cpus), len(tuners) * len(budgets)),
                              runner_cpus=cpus[-1:] if len(cpus) > 1 else None)

        def finish(seed, w) -> None:
            with open(lock, "a") as held:
                fcntl.flock(held, fcntl.LOCK_EX)  # the others' programs wait meanwhile
                try:
                    _finish_pair(w, tuners, runs_to, budgets, seed, out, target, remeasurer,
                                 rounds, models)
                finally:
                    fcntl.flock(held, fcntl.LOCK_UN)

        def ended(run: dict, error: str | None) -> None:
            key = (run["seed"], run["workload"].key)
            left[key] -= 1
            if error is not None:
                left[key] = -len(tuners)  # never finished here
            elif left[key] == 0:
                finish(run["seed"], run["workload"])

        try:
            for seed, w in pairs:  # runs finished before: re-measured first
                if left[(seed, w.key)] == 0:
                    finish(seed, w)
            if runs:
                _tune_side_by_side(runs, target, measurer, inputs, trials_per_iter, jobs, lock,
                                   progress, ended)
        finally:
            remeasurer.close()


def core_slices(cpus: list[int], jobs: int) -> tuple[list[list[int]], list[int] | None]:
    """`jobs` equal slices of the cores `cpus` but the last, which measures (None: all of
    them, where there is only one core): (slices, measuring cores). Cores left over stay idle,
    so that every run searches with as many; with more jobs than cores the slices share."""
    cpus = sorted(cpus)
    if len(cpus) == 1:
        return [cpus] * jobs, None
    usable, measuring = cpus[:-1], cpus[-1:]
    per = max(1, len(usable) // jobs)
    return [[usable[(i * per + k) % len(usable)] for k in range(per)] for i in range(jobs)], \
        measuring


_CORES: list[int] | None = None  # in a worker of `_tune_side_by_side`: its slice of cores


def _take_cores(slices) -> None:
    """Initializer of a `_tune_side_by_side` worker: pin this process, every thread of it, to
    the next slice of `slices` (a queue) and make its thread pools as large as the slice. A
    spawned worker has imported numpy (and whatever the main module imports) before this runs,
    and OpenBLAS started its threads then, on every core: pinning only this thread would leave
    them free to run on the measuring core."""
    from threadpoolctl import threadpool_limits

    global _CORES
    _CORES = slices.get()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(len(_CORES))  # pools started later (torch, XGBoost)
    for thread in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(thread), _CORES)
        except OSError:  # a thread that ended meanwhile
            pass
    threadpool_limits(len(_CORES))  # pools already started


def _tune_elsewhere(job: dict) -> str | None:
    """In a process of its own, on its slice of cores (`_take_cores`): one tuner's run as
    `_tune_run` does it, searching with as many threads as the slice has cores, with a
    measurer like the caller's whose programs take turns on the device with the other
    processes', measured on `job["runner_cpus"]`. Returns None, or the error in one line."""
    import torch
    import tvm

    from costmodel.predictor import CostModelPredictor
    from datagen.measure import Measurer
    from datagen.tvm_env import make_target

    try:
        threads = len(_CORES)
        torch.set_num_threads(threads)
        target = make_target(json.loads(job["target"]))
        predictor = None
        if job["checkpoints"]:
            predictor = CostModelPredictor.load(job["checkpoints"], device=job["device"],
                                                blend=job["blend"])
        inputs = dataclasses.replace(job["inputs"], predictor=predictor, threads=threads)
        measurer = Measurer(target, **job["measurer"], device_lock=job["lock"],
                            runner_cpus=job["runner_cpus"])
        try:
            _tune_run(tvm.ir.load_json(job["definition"]), target, job["tuner"], job["trials"],
                      job["work_dir"], measurer, inputs, job["trials_per_iter"], False, "",
                      job["uses"])
        finally:
            measurer.close()
    except Exception as err:  # noqa: BLE001  (the caller tunes this run again itself)
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


def _tune_side_by_side(runs: list[dict], target, measurer, inputs, trials_per_iter, jobs,
                       lock: str, progress: bool = True, ended=None) -> dict[str, str]:
    """Tune `runs` (each: workload, seed, tuner, trials, work_dir, uses) in up to `jobs`
    processes at once, started in their order, their programs taking turns on the device
    through the file `lock` (see the module doc); `ended(run, error)` is called here as each
    one ends (error None: it finished). Returns {work_dir: error} of the runs that failed
    there: those are left unfinished, for the caller to tune again."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    from datagen.tvm_env import target_json

    predictor = inputs.predictor
    job = {"target": target_json(target), "measurer": measurer.settings, "lock": lock,
           "checkpoints": [m.path for m in predictor.members] if predictor else None,
           "blend": predictor is not None and predictor.companion is not None,
           "device": str(predictor.device) if predictor else None,
           "trials_per_iter": trials_per_iter}
    base = dataclasses.replace(inputs, predictor=None)
    context = multiprocessing.get_context("spawn")  # no fork of a process running TVM
    slices, job["runner_cpus"] = core_slices(os.sched_getaffinity(0), jobs)
    queue = context.Queue()
    for cores in slices[:len(runs)]:
        queue.put(cores)
    errors = {}
    with ProcessPoolExecutor(min(jobs, len(runs)), mp_context=context,
                             initializer=_take_cores, initargs=(queue,)) as pool, \
            tqdm(total=len(runs), desc=f"{len(runs)} runs, up to {jobs} side by side",
                 unit="run", disable=not progress) as bar:
        futures = {pool.submit(_tune_elsewhere, {
            **job, "definition": run["workload"].definition(), "tuner": run["tuner"],
            "trials": run["trials"], "work_dir": run["work_dir"], "uses": run["uses"],
            "inputs": dataclasses.replace(base, seed=run["seed"])}): run for run in runs}
        for future in as_completed(futures):
            run = futures[future]
            name = f"{run['workload'].key} {run['tuner']} s{run['seed']}"
            try:
                error = future.result()
            except Exception as err:  # noqa: BLE001  (its process died: tuned here)
                error = f"{type(err).__name__}: {err}"
            if error is not None:
                errors[run["work_dir"]] = error
                bar.write(f"{name} failed in its own process ({error}); tuning it here")
            else:
                bar.set_postfix_str(f"{name} finished")
            if ended is not None:
                ended(run, error)
            bar.update()
    return errors


def finalist(work_dir: str, budget: int) -> str | None:
    """The trace (JSON) of the fastest schedule among a run's first `budget` trials."""
    from datagen.measure import run_latency

    path = os.path.join(work_dir, RECORDS_FILE)
    best, trace = math.inf, None
    if os.path.exists(path):
        with open(path) as f:
            lines = [line for line in f if line.strip()][:budget]
        for line in lines:
            record = json.loads(line)[1]
            latency = run_latency(record[1])
            if latency is not None and latency < best:
                best, trace = latency, json.dumps(record[0])
    return trace


def remeasure_finalists(workload, dirs: dict[str, str], runs_to: dict[str, int],
                        budgets: list[int], target, measurer, rounds: int) -> dict:
    """{"rounds", "budgets": {budget: {tuner: re-measured latencies}}, "finalists"}: every
    tuner's finalist at each budget it reached, all measured together, interleaved.

    A tuner without a successful trial gets [inf]; a finalist that fails now counts as inf.
    """
    from datagen.sampler import replay

    finalists = {(b, t): finalist(wd, b) for b in budgets for t, wd in dirs.items()
                 if runs_to[t] >= b}
    traces = sorted({tr for tr in finalists.values() if tr is not None})
    latencies = {}
    if traces:
        mods = [replay(workload.mod, tr).mod for tr in traces]
        runs = measurer.remeasure(mods, rounds)
        for tr, results in zip(traces, runs):
            latencies[tr] = [r.median if r.median is not None else math.inf for r in results]
    out_budgets = {str(b): {t: latencies.get(finalists[(b, t)], [math.inf]) for t in dirs
                            if (b, t) in finalists}
                   for b in budgets}
    return {"rounds": rounds, "budgets": out_budgets,
            "finalists": {f"{t}@{b}": finalists[(b, t)] for (b, t) in finalists}}


def _finished(work_dir: str, trials: int, models: dict | None = None) -> list[float] | None:
    """The run's latencies if it finished with these models (its design space may hold fewer
    than `trials`); with `trials` 0, whatever it measured."""
    if trials:
        try:
            with open(os.path.join(work_dir, "done")) as f:
                done = json.load(f)
        except (OSError, ValueError):
            return None
        if not isinstance(done, dict) or not same_models(done.get("models"), models):
            return None
    curves = read_curve(work_dir)
    return next(iter(curves.values()), [])


def _best_at(curve: list[float], budget: int) -> float:
    best = best_so_far(curve[:budget])
    return float(best[-1]) if len(best) else math.inf


def _trials_to_reach(curve: list[float], level: float) -> float:
    hits = np.flatnonzero(best_so_far(curve) <= level * (1 + 1e-9))
    return float(hits[0] + 1) if len(hits) else math.inf


def _median(values) -> float:
    return float(np.median(values)) if len(values) else math.inf


def _geomean(values) -> float:
    values = np.asarray(values, float)
    return float(np.exp(np.mean(np.log(values)))) if len(values) and \
        np.all(np.isfinite(values)) else math.inf


def summarize(results: dict, remeasured: dict, budgets: list[int], trials: int,
              tuner_trials: dict[str, int] | None = None) -> dict:
    """In-run best latency per budget, re-measured finalists, trials to reach the reference's
    best, per workload and over workloads, and the paired statistics of `paired_stats`.

    Per workload and tuner: the median over seeds. Over workloads: the geometric mean of the
    latencies and the median of the trials to reach. `to_reach` compares each seed with the
    reference's run of the same seed (inf: never reached within the budget). A tuner given a
    smaller budget in `tuner_trials` has no figures at the budgets beyond it.
    """
    summary: dict = {"budgets": budgets, "workloads": {}, "geomean": {}}
    for key, by_tuner in results.items():
        ref = by_tuner.get(REFERENCE)
        rows = {}
        for tuner, curves in by_tuner.items():
            runs_to = (tuner_trials or {}).get(tuner, trials)
            row = {f"best@{b}": _median([_best_at(c, b) for c in curves]) for b in budgets
                   if b <= runs_to}
            for b, finals in remeasured.get(key, {}).items():
                if tuner in finals:
                    row[f"remeasured@{b}"] = _median([_median(f) for f in finals[tuner]])
            if ref:
                row["to_reach"] = _median([
                    _trials_to_reach(c, _best_at(r, trials)) for c, r in zip(curves, ref)])
            rows[tuner] = row
        summary["workloads"][key] = rows
    tuners = list(dict.fromkeys(t for rows in summary["workloads"].values() for t in rows))
    for tuner in tuners:
        rows = [r[tuner] for r in summary["workloads"].values() if tuner in r]
        geo = {k: _geomean([r[k] for r in rows]) for k in rows[0]
               if k.startswith(("best@", "remeasured@"))}
        reach = [r["to_reach"] for r in rows if "to_reach" in r]
        if reach:  # the median over workloads: a workload never reached counts as the worst
            geo["to_reach"] = _median(reach)
            geo["reached"] = f"{sum(math.isfinite(v) for v in reach)}/{len(reach)}"
        summary["geomean"][tuner] = geo
    summary["paired"] = paired_stats(results, remeasured, trials)
    return summary


def paired_stats(results: dict, remeasured: dict, trials: int, seed: int = 0) -> list[dict]:
    """Ours (`OURS`) against every other tuner, over the (workload, seed) pairs, on re-measured
    finalists: at equal budgets, and ours at the smallest against theirs at the largest.

    Per pair: the median of the per-round ratios of the re-measured latencies (rounds are
    interleaved, so each round's pair shares the machine's state; below 1: ours is faster),
    their spread (25th to 75th percentile), and the
    trials ours needs in-run to reach the baseline's in-run latency at its budget. Over pairs:
    wins, ties (within `TIE`) and losses, the geometric-mean ratio with a paired bootstrap 95%
    interval (pairs resampled), and the median trials to reach.
    """
    rng = np.random.default_rng(seed)
    keys = [k for k in results if k in remeasured and remeasured[k]]
    if not keys:
        return []
    budgets = sorted(int(b) for b in remeasured[keys[0]])
    combos = [(b, b) for b in budgets] + ([(budgets[0], budgets[-1])] if len(budgets) > 1 else [])
    tuners = list(results[keys[0]])
    out = []
    for ours in [t for t in OURS if t in tuners]:
        for base in [t for t in tuners if t != ours]:
            for b_ours, b_base in combos:
                if any(ours not in remeasured[k][b_ours] or base not in remeasured[k][b_base]
                       for k in keys):
                    continue  # one of them did not run that far
                pairs = []
                for key in keys:
                    mine = remeasured[key][b_ours][ours]
                    theirs = remeasured[key][b_base][base]
                    for s, (a, b) in enumerate(zip(mine, theirs)):
                        per_round = np.asarray(a[:len(b)], float) / np.asarray(b[:len(a)], float)
                        level = _best_at(results[key][base][s], b_base)
                        pairs.append({
                            "workload": key, "seed_index": s,
                            "ratio": _median(per_round),
                            "spread": [float(np.percentile(per_round, 25)),
                                       float(np.percentile(per_round, 75))],
                            "to_reach": _trials_to_reach(results[key][ours][s][:b_ours], level)})
                out.append(_pair_summary(ours, b_ours, base, b_base, pairs, rng))
    return out


def _pair_summary(ours: str, b_ours: int, base: str, b_base: int, pairs: list[dict],
                  rng) -> dict:
    ratios = np.array([p["ratio"] for p in pairs], float)
    finite = np.isfinite(ratios) & (ratios > 0)
    row = {"ours": ours, "ours_budget": b_ours, "baseline": base, "baseline_budget": b_base,
           "pairs": pairs, "n": len(pairs),
           "wins": int(np.sum(ratios < 1 - TIE)), "ties": int(np.sum(np.abs(ratios - 1) <= TIE)),
           "losses": int(np.sum(ratios > 1 + TIE)),
           "geomean_ratio": _geomean(ratios), "ci95": [math.inf, math.inf]}
    if finite.all() and len(ratios):
        logs = np.log(ratios)
        idx = rng.integers(0, len(logs), (BOOTSTRAP_SAMPLES, len(logs)))
        boot = np.exp(logs[idx].mean(axis=1))
        row["ci95"] = [float(np.percentile(boot, 2.5)), float(np.percentile(boot, 97.5))]
    reach = [p["to_reach"] for p in pairs]
    row["to_reach_median"] = _median(reach)
    row["reached"] = f"{sum(math.isfinite(v) for v in reach)}/{len(reach)}"
    return row


def _fmt_trials(v: float) -> str:
    return "never" if not math.isfinite(v) else f"{v:.0f}"


def format_summary(summary: dict, descriptions: dict[str, str] | None = None) -> str:
    """Plain-text tables (per workload, then the geometric mean) and the paired statistics;
    with `descriptions`, first a line on what each tuner is."""
    budgets = summary["budgets"]
    remeasured = sorted({k for row in summary["geomean"].values() for k in row
                         if k.startswith("remeasured@")}, key=lambda k: int(k.split("@")[1]))
    head = f"{'tuner':<18}" + "".join(f"{f'best@{b} (us)':>15}" for b in budgets) + \
        "".join(f"{k.replace('remeasured', 're-measured') + ' (us)':>22}" for k in remeasured) + \
        f"{'trials to reach ' + REFERENCE + '@max':>32}"
    lines = []
    if descriptions:
        lines += ["tuners (all in MetaSchedule's loop, same builder, runner and batch size):"]
        lines += [f"  {t:<18}{descriptions[t]}" for t in summary["geomean"] if t in descriptions]
        lines += [""]

    def fmt_row(tuner, row):
        def cell(key, width):  # a tuner given a smaller budget has no figure at a larger one
            return f"{row[key] * 1e6:>{width}.1f}" if key in row else f"{'-':>{width}}"

        cells = "".join(cell(f"best@{b}", 15) for b in budgets)
        cells += "".join(cell(k, 22) for k in remeasured)
        reach = row.get("to_reach")
        text = "" if reach is None else _fmt_trials(reach)
        if "reached" in row:
            text += f" (reached {row['reached']})"
        return f"{tuner:<18}{cells}{text:>32}"

    for key, rows in summary["workloads"].items():
        lines += [key, head] + [fmt_row(t, r) for t, r in rows.items()] + [""]
    lines += ["geometric mean over workloads (trials to reach: median over workloads)", head]
    lines += [fmt_row(t, r) for t, r in summary["geomean"].items()]
    if summary.get("paired"):
        lines += ["", "paired, on re-measured finalists (ratio < 1: ours faster; wins/ties/losses "
                  f"at ±{TIE:.0%}; 95% interval: paired bootstrap over pairs, or for one pair "
                  "the 25-75th percentile over re-measurement rounds)"]
    for row in summary.get("paired", []):
        if row["n"] == 1:
            spread = row["pairs"][0]["spread"]
            interval = f"rounds {spread[0]:.3f}-{spread[1]:.3f}"
        else:
            interval = f"95% CI {row['ci95'][0]:.3f}-{row['ci95'][1]:.3f}"
        lines.append(
            f"{row['ours']}@{row['ours_budget']} / {row['baseline']}@{row['baseline_budget']}: "
            f"ratio {row['geomean_ratio']:.3f} ({interval}) over {row['n']} pair(s); "
            f"{row['wins']} wins, {row['ties']} ties, {row['losses']} losses; trials to reach its "
            f"in-run latency: median {_fmt_trials(row['to_reach_median'])} "
            f"(reached {row['reached']})")
    return "\n".join(lines)


def plot_curves(results: dict, path: str) -> None:
    """Best latency against trials, median over seeds, one panel per workload."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from training.figures import save_figure

    n = len(results)
    cols = min(n, 3)
    rows = int(math.ceil(n / cols))
    fig, axes = plt.subplots(rows, cols, figsize=(5 * cols, 3.6 * rows), squeeze=False)
    for ax, (key, by_tuner) in zip(axes.flat, results.items()):
        for tuner, curves in by_tuner.items():
            length = min(len(c) for c in curves)
            if not length:
                continue
            best = np.median([best_so_far(c[:length]) for c in curves], axis=0) * 1e6
            ax.plot(np.arange(1, length + 1), best, label=tuner)
        ax.set(title=key, xlabel="measured trials", ylabel="best latency (us)")
        ax.set_yscale("log")
        ax.grid(alpha=0.3)
    for ax in list(axes.flat)[n:]:
        ax.axis("off")
    axes.flat[0].legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=110)
    plt.close(fig)
