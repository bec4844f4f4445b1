"""The runs of a comparison on disk: one database folder per (workload, tuner, seed) under
`out/runs/`, marked done with the models and device it was tuned with, and one small file per
finished (workload, seed) under `out/pairs/` with every tuner's curve and re-measured
finalists. A finished run or pair is read back instead of tuned again, so an interrupted
comparison resumes where it stopped; one tuned with other models or on another device is not.
Both are written and read as any benchmark's cells (`datagen.grid`: atomically, pairs
xz-compressed).

Best-so-far over noisy measurements favours the tuner that drew the luckiest outlier, so after
all tuners of a (workload, seed) have run, each tuner's best schedule at each compared budget
(its finalist) is built again and re-measured together with the others, interleaved (A B C,
A B C, ...), `rounds` times; tuners are compared on these re-measured latencies. The in-run
curves give the trials-to-reach figures.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
import time

from datagen.errors import UserError
from datagen.grid import read_json, write_json
from datagen.measure import device_name
from tuning.tuner import RECORDS_FILE, SearchInputs, read_curve, tune_workload

REMEASURE_ROUNDS = 10


def run_dir(out: str, workload_key: str, tuner: str, seed: int) -> str:
    return os.path.join(out, "runs", workload_key.replace("/", "__"), tuner, f"seed{seed}")


def pair_file(out: str, workload_key: str, seed: int) -> str:
    """A finished (workload, seed): every tuner's curve, finalists and re-measurements, small
    enough to keep under version control, so a comparison resumes without its databases.
    xz-compressed JSON (the finalists' traces repeat; about a sixth of the plain text); one
    written plain before (the name without `.xz`) is read where no compressed one is."""
    return os.path.join(out, "pairs", f"{workload_key.replace('/', '__')}__seed{seed}.json.xz")


def same_models(a: dict | None, b: dict | None) -> bool:
    """Whether two `model_ids` name the same models: by content (SHA-256), whatever the files
    were called (a pretrained XGBModel read from its cache, then from beside its checkpoint);
    by the model's own arrays where both name them (`model_sha256`), else by the files."""
    def entries(ids):
        return {kind: v if isinstance(v, list) else [v] for kind, v in (ids or {}).items()}

    ea, eb = entries(a), entries(b)
    if ea.keys() != eb.keys():
        return False
    for kind in ea:
        if len(ea[kind]) != len(eb[kind]):
            return False
        for x, y in zip(ea[kind], eb[kind]):
            key = "model_sha256" if "model_sha256" in x and "model_sha256" in y else "sha256"
            if x.get(key) != y.get(key):
                return False
    return True


def model_ids(inputs: SearchInputs) -> dict:
    """The models the tuners search with (file names and SHA-256): a pair run with other
    models is not read back. The pretrained XGBModel is also named by its model's arrays
    alone (`model_sha256`): its file beside a checkpoint carries the blend's weights too,
    which bo reads (in the checkpoints' names) and ms-xgb-pretrained does not, so a run of it
    stays read back when the blend is weighted again; runs recorded before are matched by
    the file. bo's search depth (`SearchInputs.max_depth`) is named too, as `search`, and its
    share of parents (`parent_share`) as `parents`, its parents per space as `spaces`."""
    def ident(path, model_only: bool = False):
        with open(path, "rb") as f:
            out = {"file": os.path.basename(path), "sha256": hashlib.sha256(f.read()).hexdigest()}
        if model_only:
            import numpy as np

            from costmodel.blend import SHARE, WEIGHT

            digest = hashlib.sha256()
            with np.load(path, allow_pickle=False) as z:
                for key in sorted(set(z.files) - {WEIGHT, "weight", SHARE}):
                    digest.update(key.encode() + b"\0" + z[key].tobytes())
            out["model_sha256"] = digest.hexdigest()
        return out

    ids = {}
    if inputs.predictor is not None:
        ids["checkpoints"] = [ident(p) for p in inputs.predictor.files]  # and any companion
        if inputs.network_share is not None:  # a blend weight other than the file's
            ids["checkpoints"].append({"file": "network_share",
                                       "sha256": f"{inputs.network_share:g}"})
    if inputs.pretrained_xgb:
        ids["pretrained_xgb"] = ident(inputs.pretrained_xgb, model_only=True)
    if inputs.max_depth != 1:  # (runs made before the option searched with 1 and name none)
        ids["search"] = {"file": "max_depth", "sha256": str(inputs.max_depth)}
    if inputs.parent_share:  # (likewise with none)
        ids["parents"] = {"file": "parent_share", "sha256": f"{inputs.parent_share:g}"}
    if inputs.space_parents:
        ids["spaces"] = {"file": "space_parents", "sha256": str(inputs.space_parents)}
    return ids


def check_devices(out: str, order, tuners: list[str], device: dict) -> None:
    """Before anything is tuned: the finished runs and pairs of `order` ((seed, workload))
    under `out` were measured on `device`, where they say what they were measured on."""
    here = device_name(device)
    for seed, w in order:
        done = [os.path.join(run_dir(out, w.key, t, seed), "done") for t in tuners]
        for path in [*done, pair_file(out, w.key, seed)]:
            try:
                made = read_json(path)
            except (OSError, ValueError):
                continue
            there = device_name(made.get("device") if isinstance(made, dict) else None)
            if here is not None and there is not None and there != here:
                raise UserError(f"{path} was measured on {there} and this host measures on "
                                f"{here}: a comparison's runs share one device; tune into "
                                "another --out")


def read_pair(path: str, runs_to: dict[str, int], budgets: list[int], rounds: int,
               models: dict | None):
    """A finished pair of these tuners, budgets, rounds and models (None: any models).

    Raises:
        UserError: the file is damaged (not the JSON a finished pair writes).
    """
    try:
        pair = read_json(path)
    except OSError:
        return None
    except ValueError as err:
        raise UserError(f"{path} is damaged ({str(err)[:120]}); delete it and that (workload, "
                        "seed) is compared again") from None
    same = pair.get("rounds") == rounds and pair.get("tuner_trials") == runs_to and \
        (models is None or same_models(pair.get("models"), models)) and \
        all(str(b) in pair["budgets"] for b in budgets)
    return pair if same else None


def models_used(tuner: str, models: dict) -> dict:
    """The part of `models` that `tuner` searches with (a run tuned with others is redone)."""
    from tuning.tuner import TUNERS

    spec = TUNERS.get(tuner)
    return {k: v for k, v in models.items()
            if (k == "checkpoints" and spec.needs_checkpoint) or
            (k == "pretrained_xgb" and spec.needs_pretrained_xgb) or
            (k in ("search", "parents", "spaces") and spec.deepens)}


def tune_run(mod, target, tuner, trials, wd, measurer, inputs, trials_per_iter, progress,
              desc, uses) -> None:
    """One tuner's run into `wd`, from scratch, marked done when it finished, with its wall
    time (search, building and measuring: what the tuner costs its user)."""
    shutil.rmtree(wd, ignore_errors=True)
    start = time.perf_counter()
    tune_workload(mod, target, tuner, trials, wd, measurer, inputs, trials_per_iter,
                  progress=progress, desc=desc)
    write_json(os.path.join(wd, "done"), {"trials": len(finished_curve(wd, 0) or []),
                                           "models": uses, "threads": inputs.threads,
                                           "device": measurer.device,
                                           "wall_s": time.perf_counter() - start})


def wall_seconds(work_dir: str) -> float | None:
    """The wall time a finished run took (None: unrecorded, as in runs made before it was)."""
    try:
        done = read_json(os.path.join(work_dir, "done"))
    except (OSError, ValueError):
        return None
    wall = done.get("wall_s") if isinstance(done, dict) else None
    return float(wall) if isinstance(wall, (int, float)) else None


def run_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, inputs,
              trials_per_iter, progress, rounds, models) -> dict:
    """Tune the pair's unfinished runs here, one after another, then `finish_pair`."""
    dirs = {t: run_dir(out, w.key, t, seed) for t in tuners}
    uses = {t: models_used(t, models) for t in tuners}
    inputs = dataclasses.replace(inputs, seed=seed)
    for tuner in tuners:
        if finished_curve(dirs[tuner], runs_to[tuner], uses[tuner]) is None:
            tune_run(w.mod, target, tuner, runs_to[tuner], dirs[tuner], measurer, inputs,
                      trials_per_iter, progress, f"{w.key} {tuner} s{seed}", uses[tuner])
    return finish_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, rounds, models)


def finish_pair(w, tuners, runs_to, budgets, seed, out, target, measurer, rounds,
                 models) -> dict:
    """A pair whose runs are finished: its curves and re-measured finalists, written to its
    `pair_file`."""
    dirs = {t: run_dir(out, w.key, t, seed) for t in tuners}
    curves = {t: finished_curve(dirs[t], 0) or [] for t in tuners}
    pair = remeasure_finalists(w, dirs, runs_to, budgets, target, measurer, rounds)
    pair.update(curves=curves, tuner_trials=runs_to, target=str(target), models=models,
                device=measurer.device, wall_s={t: wall_seconds(dirs[t]) for t in tuners})
    write_json(pair_file(out, w.key, seed), pair)
    return pair


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


def finished_curve(work_dir: str, trials: int, models: dict | None = None) -> list[float] | None:
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
