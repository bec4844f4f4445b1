"""Several tuning runs at once, each in a process of its own (`tuning.compare`'s `jobs`).

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
import json
import os

from tuning.runs import finish_pair, finished_curve, models_used, run_dir, tune_run


def pairs_side_by_side(pairs, tuners, runs_to, budgets, out, target, measurer, inputs,
                        trials_per_iter, progress, rounds, models, jobs) -> None:
    """Tune the unfinished runs of `pairs` ((seed, workload), in order) in up to `jobs`
    processes at once, and finish each pair (`finish_pair`) as soon as its runs are: here, on
    the last core, holding the device lock (see the module doc). A pair with a run that failed
    in its process is left for `run_pair`."""
    import fcntl
    import tempfile

    from datagen.errors import UserError
    from datagen.measure import Measurer

    if measurer.tracker is not None:
        raise UserError("tuners side by side take turns on this host's device; through an RPC "
                        "tracker, tune them one after another (jobs 1)")
    if not pairs:
        return
    uses = {t: models_used(t, models) for t in tuners}
    runs, left = [], {}  # the runs to tune; per pair, how many of its runs are still to end
    for seed, w in pairs:
        mine = [t for t in tuners
                if finished_curve(run_dir(out, w.key, t, seed), runs_to[t], uses[t]) is None]
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
                    finish_pair(w, tuners, runs_to, budgets, seed, out, target, remeasurer,
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
    forked worker has imported numpy (and whatever its server imported) before this runs,
    and OpenBLAS started its threads then, on every core: pinning only this thread would leave
    them free to run on the measuring core."""
    from threadpoolctl import threadpool_limits

    from datagen.fork_pool import pin_threads

    global _CORES
    _CORES = slices.get()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(len(_CORES))  # pools started later (torch, XGBoost)
    pin_threads(_CORES)
    threadpool_limits(len(_CORES))  # pools already started


def _tune_elsewhere(job: dict) -> str | None:
    """In a process of its own, on its slice of cores (`_take_cores`): one tuner's run as
    `tune_run` does it, searching with as many threads as the slice has cores, with a
    measurer like the caller's whose programs take turns on the device with the other
    processes', measured on `job["runner_cpus"]`. Returns None, or the error in one line."""
    import torch
    import tvm

    from costmodel.predictor import CostModelPredictor
    from datagen.tvm_env import make_target

    try:
        threads = len(_CORES)
        torch.set_num_threads(threads)
        target = make_target(json.loads(job["target"]))
        predictor = None
        if job["checkpoints"]:
            predictor = CostModelPredictor.load(job["checkpoints"], device=job["device"],
                                                blend=job["blend"])
            predictor.use_head(job["head"])  # the caller's
            if job["inputs"].network_share is not None:  # the run's blend weight, as here
                predictor.companion.weight = job["inputs"].network_share
        inputs = dataclasses.replace(job["inputs"], predictor=predictor, threads=threads)
        measurer = _measurer_for(job, target)
        try:
            tune_run(tvm.ir.load_json(job["definition"]), target, job["tuner"], job["trials"],
                      job["work_dir"], measurer, inputs, job["trials_per_iter"], False, "",
                      job["uses"])
        except BaseException:
            _drop_measurer()  # the next run starts from fresh workers
            raise
    except Exception as err:  # noqa: BLE001  (the caller tunes this run again itself)
        return f"{type(err).__name__}: {str(err).splitlines()[0] if str(err) else ''}"
    return None


_MEASURER: tuple | None = None  # in a worker of `_tune_side_by_side`: (settings, measurer)


def _measurer_for(job: dict, target):
    """The measurer of this worker process's runs, like the caller's (its programs taking
    turns on the device, measured on `job["runner_cpus"]`): made at the process's first run
    and kept for its next ones, as one measurer serves every run tuned one after another, so
    that its build and run workers (each imports TVM: seconds) start once per process."""
    import atexit

    from datagen.measure import Measurer

    global _MEASURER
    settings = json.dumps([job["target"], job["measurer"], job["lock"], job["runner_cpus"]],
                          sort_keys=True)
    if _MEASURER is not None and _MEASURER[0] != settings:
        _drop_measurer()
    if _MEASURER is None:
        measurer = Measurer(target, **job["measurer"], device_lock=job["lock"],
                            runner_cpus=job["runner_cpus"])
        atexit.register(measurer.close)  # as the pool ends this process
        _MEASURER = (settings, measurer)
    return _MEASURER[1]


def _drop_measurer() -> None:
    """Close this process's kept measurer, if any."""
    import atexit

    global _MEASURER
    if _MEASURER is not None:
        atexit.unregister(_MEASURER[1].close)
        _MEASURER[1].close()
        _MEASURER = None


def _tune_side_by_side(runs: list[dict], target, measurer, inputs, trials_per_iter, jobs,
                       lock: str, progress: bool = True, ended=None) -> dict[str, str]:
    """Tune `runs` (each: workload, seed, tuner, trials, work_dir, uses) in up to `jobs`
    processes at once, started in their order, their programs taking turns on the device
    through the file `lock` (see the module doc); `ended(run, error)` is called here as each
    one ends (error None: it finished). Returns {work_dir: error} of the runs that failed
    there: those are left unfinished, for the caller to tune again."""
    from concurrent.futures import ProcessPoolExecutor, as_completed

    from tqdm import tqdm

    from datagen.fork_pool import fork_context
    from datagen.tvm_env import target_json

    predictor = inputs.predictor
    job = {"target": target_json(target), "measurer": measurer.settings, "lock": lock,
           "checkpoints": predictor.checkpoints if predictor else None,
           "blend": predictor is not None and predictor.companion is not None,
           "head": predictor.head if predictor else 0,
           "device": str(predictor.device) if predictor else None,
           "trials_per_iter": trials_per_iter}
    base = dataclasses.replace(inputs, predictor=None)
    context = fork_context()  # forked from the server that imported TVM and runs nothing
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
