"""Tune workloads with MetaSchedule's loop and a chosen search strategy and cost model.

Every tuner in `TUNERS` runs inside MetaSchedule's own `tune_tir` / `tune_relax` with the same
builder, runner and JSON database, so they differ only in how they pick what to measure:

- "bo": `BayesOptSearch` with the learned model as prior (GP residual, EI);
- "bo-evo": "bo" whose pool also evolves a few generations from what its posterior ranks
  fastest, as EvolutionarySearch evolves its population;
- "bo-mix": `BayesOptSearch` whose prior mixes the network, its tree companion and the
  pretrained XGBModel, each weighted by how well it ranks the run's own measurements;
- "ms-default": MetaSchedule's default, EvolutionarySearch with its XGBModel, which answers
  with random scores until it has 100 measurements;
- "ms-ours": EvolutionarySearch with our model as its cost model (`LearnedCostModel`);
- "ms-mix": EvolutionarySearch with bo-mix's mixed prior and GP as its cost model
  (`MixtureCostModel`): with bo-mix, bo and ms-ours, the search x model ablation;
- "random": ReplayTrace (random schedules of the design space);
- "ytopt": `BayesOptSearch` with a random forest over decisions and LCB, no prior.

A new tuner is one `@_tuner(...)` function here plus its test.

The database's tuning-record file is appended in measurement order, so it is also the tuning
curve, and a run that stops midway keeps every measurement it committed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import logging
import math
import os
from typing import Callable

import numpy as np
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

from costmodel.registry import Registry
from datagen.errors import UserError
from datagen.measure import run_latency
from datagen.tvm_env import METASCHEDULE_LOGGER

DEFAULT_TRIALS_PER_ITER = 8
# how many mutations in a row bo's new candidates may be from its best measured schedules once
# one mutation of them finds nothing unseen: 2 or 3 were no faster on ELECTRA-small's heaviest
# tasks (bench/heavy_tasks.py, bench/README.md), so bo stays at one
BO_MAX_DEPTH = 1
# the share of its measured schedules (the fastest) bo mutates, and how many of the fastest of
# each design space it mutates besides: a fifth (one seed) and two a space (two seeds) were no
# faster on the same tasks, so bo mutates its eight fastest alone
BO_PARENT_SHARE = 0.0
BO_SPACE_PARENTS = 0
RECORDS_FILE = "database_tuning_record.json"
WORKLOADS_FILE = "database_workload.json"
TIMING_FILE = "timing.json"  # how a run's candidates are timed: a resumed run must time alike


def load_predictor(checkpoints: str | list[str] | None, target_kind: str | None = None,
                   device: str | None = None, target=None):
    """The shipped checkpoint of the `target_kind` ("llvm" if None) unless others are given
    (several: a seed ensemble), its networks on the torch `device` ("cpu" if None). With the
    tuning `target` (a `tvm.target.Target`), a network with a head per target predicts with
    the head for it (`CostModelPredictor.head_for_target`).

    Raises:
        UserError: see `CostModelPredictor.load`; a checkpoint for another target kind, a
            device this torch cannot use.
    """
    from costmodel import checkpoints as shipped
    from costmodel.predictor import CostModelPredictor

    predictor = CostModelPredictor.load(
        checkpoints or shipped.for_target(target_kind or "llvm"), target_kind=target_kind,
        device=device)
    if target is not None:
        from datagen.tvm_env import target_json

        predictor.use_head(predictor.head_for_target(target_json(target)))
    return predictor


@dataclasses.dataclass(frozen=True)
class Tuner:
    """A way to pick what MetaSchedule measures: a (strategy, cost model) factory."""

    make: Callable
    description: str
    needs_checkpoint: bool
    needs_pretrained_xgb: bool
    deepens: bool = False  # a BayesOptSearch that mutates its best: SearchInputs.max_depth,
    # parent_share and space_parents count


# every tuner runs in MetaSchedule's loop with the same builder, runner and batch size
TUNERS = Registry("tuner")


@dataclasses.dataclass(frozen=True)
class SearchInputs:
    """What a tuner may build its search from."""

    predictor: object = None  # a CostModelPredictor
    seed: int = 0
    acquisition: str = "ei"
    adapt_steps: int | None = None
    pretrained_xgb: str | None = None  # a `costmodel.pretrained_xgb` file
    threads: int | None = None  # threads of a workload's search and its models (None:
    # MetaSchedule's default, the host's physical cores, which a network's search always uses)
    network_share: float | None = None  # the predictor's blend weight, when set for the run
    max_depth: int = BO_MAX_DEPTH  # BayesOptSearch's: mutations in a row once its parents'
    # one-mutation neighbours are all seen
    parent_share: float = BO_PARENT_SHARE  # BayesOptSearch's: the share of its measured
    # schedules (the fastest; at least its 8 best) whose mutations it draws
    space_parents: int = BO_SPACE_PARENTS  # BayesOptSearch's: and the fastest this many of
    # each design space


def _tuner(name: str, description: str, needs_checkpoint: bool = False,
           needs_pretrained_xgb: bool = False, deepens: bool = False) -> Callable:
    """Register `make(SearchInputs) -> (strategy, cost_model)` under `name`."""
    def register(make: Callable) -> Callable:
        TUNERS.register(name)(Tuner(make, description, needs_checkpoint, needs_pretrained_xgb,
                                    deepens))
        return make
    return register


def _mutations(inputs: SearchInputs) -> dict:
    """BayesOptSearch's options that `SearchInputs` sets: how it mutates, and its seed."""
    return {"max_depth": inputs.max_depth, "parent_share": inputs.parent_share,
            "space_parents": inputs.space_parents, "seed": inputs.seed}


@_tuner("bo", "ours: BayesOptSearch, the learned model as prior + a GP on its residual, EI",
        needs_checkpoint=True, deepens=True)
def _bo(inputs: SearchInputs):
    from tuning.search import BayesOptSearch

    return BayesOptSearch(inputs.predictor, "prior-gp", inputs.acquisition,
                          **_mutations(inputs)), "random"


@_tuner("bo-evo", "bo whose pool also evolves, each round, two generations from the unmeasured "
        "candidates its posterior ranks fastest (EvolutionarySearch's way of growing a "
        "population, the GP still correcting the prior)", needs_checkpoint=True, deepens=True)
def _bo_evo(inputs: SearchInputs):
    from tuning.search import BayesOptSearch

    return BayesOptSearch(inputs.predictor, "prior-gp", inputs.acquisition, generations=2,
                          **_mutations(inputs)), "random"


@_tuner("bo-mix", "BayesOptSearch, the prior a mixture of the network, its LightGBM and the "
        "pretrained XGBModel, each weighted by how well it ranks this run's measurements, + a "
        "GP on its residual, EI", needs_checkpoint=True, needs_pretrained_xgb=True,
        deepens=True)
def _bo_mix(inputs: SearchInputs):
    from costmodel.store_models import load_xgb
    from tuning.search import BayesOptSearch

    xgb = load_xgb(inputs.pretrained_xgb, seed=inputs.seed, threads=inputs.threads)
    return BayesOptSearch(inputs.predictor, "prior-mix", inputs.acquisition,
                          **_mutations(inputs), xgb=xgb), "random"


@_tuner("bo-learn", "bo whose prior's XGBModel keeps learning: each round it trains a few more "
        "boosting rounds on the run's measurements, of every task in a network (as "
        "MetaSchedule's XGBModel does), before the blend is recomputed and the GP fitted on "
        "its residual", needs_checkpoint=True, deepens=True)
def _bo_learn(inputs: SearchInputs):
    from tuning.search import BayesOptSearch

    return BayesOptSearch(inputs.predictor, "prior-learn", inputs.acquisition,
                          **_mutations(inputs)), "random"


@_tuner("ms-default", "MetaSchedule's default: EvolutionarySearch + XGBModel, which scores at "
        "random until it has 100 measurements")
def _ms_default(inputs: SearchInputs):
    return "evolutionary", "xgb"


@_tuner("ms-xgb-pretrained", "EvolutionarySearch + XGBModel trained beforehand on the "
        "checkpoint's training records (TenSet's transfer baseline), no warm-up, retrained on "
        "all its data after every round", needs_pretrained_xgb=True)
def _ms_xgb_pretrained(inputs: SearchInputs):
    from costmodel.store_models import load_xgb

    # MetaSchedule retrains once its data grew by a fifth: with thousands of pretraining
    # records that would be never within a tuning budget, so it retrains every round
    return "evolutionary", load_xgb(inputs.pretrained_xgb, seed=inputs.seed,
                                    adaptive_training=False, threads=inputs.threads)


@_tuner("ms-ours", "EvolutionarySearch + our model as its cost model (LearnedCostModel)",
        needs_checkpoint=True)
def _ms_ours(inputs: SearchInputs):
    from tuning.cost_model import LearnedCostModel

    kwargs = {} if inputs.adapt_steps is None else {"adapt_steps": inputs.adapt_steps}
    return "evolutionary", LearnedCostModel(inputs.predictor, **kwargs)


@_tuner("ms-mix", "EvolutionarySearch + bo-mix's mixed prior and GP as its cost model (the "
        "network, its tree companion and the pretrained XGBModel, weighted by how well each "
        "ranks this run's measurements)", needs_checkpoint=True, needs_pretrained_xgb=True)
def _ms_mix(inputs: SearchInputs):
    from costmodel.store_models import load_xgb
    from tuning.cost_model import MixtureCostModel

    xgb = load_xgb(inputs.pretrained_xgb, seed=inputs.seed, threads=inputs.threads)
    return "evolutionary", MixtureCostModel(inputs.predictor, xgb, inputs.seed)


@_tuner("random", "ReplayTrace: random schedules of the design space")
def _random(inputs: SearchInputs):
    from tvm.s_tir import meta_schedule as ms

    return ms.search_strategy.ReplayTrace(), "random"


@_tuner("ytopt", "ytopt's recipe: a random forest over the sampled decisions, LCB, no prior")
def _ytopt(inputs: SearchInputs):
    from tuning.search import BayesOptSearch

    return BayesOptSearch(None, "forest", "lcb", evolve_fraction=0.0, seed=inputs.seed), "random"


def make_search(tuner: str, inputs: SearchInputs):
    """(strategy, cost_model) arguments of `tune_tir` for a tuner name.

    Raises:
        UserError: an unknown tuner, or one that needs a checkpoint or a pretrained XGBModel
            and got none.
    """
    entry = TUNERS.get(tuner)
    if entry.needs_checkpoint and inputs.predictor is None:
        raise UserError(f"tuner {tuner!r} needs a cost-model checkpoint")
    if entry.needs_pretrained_xgb and inputs.pretrained_xgb is None:
        raise UserError(f"tuner {tuner!r} needs the pretrained XGBModel of a checkpoint")
    return entry.make(inputs)


@derived_object
class ProgressBar(PyMeasureCallback):
    """A MetaSchedule measure callback that shows trials done and the best latency so far."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        from tqdm import tqdm

        super().__init__()
        self.bar = tqdm(total=total, desc=desc, unit="trial", disable=not enabled, leave=True)
        self.best = math.inf

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        for res in runner_results:
            latency = run_latency(res.run_secs, res.error_msg)
            if latency is not None:
                self.best = min(self.best, latency)
        self.bar.update(len(runner_results))
        if math.isfinite(self.best):
            self.bar.set_postfix_str(f"best {self.best * 1e6:.1f} us")

    def close(self) -> None:
        self.bar.close()


@derived_object
class DeviceCheck(PyMeasureCallback):
    """A MetaSchedule measure callback, the first of a tuning run's: after a round in which a
    built program failed to run, it asks the measurer whether the device is gone
    (`Measurer.device_lost`: this host's GPU, or an RPC tracker's servers); if so it stops the
    tuning before that round reaches the database, keeping the reason in `lost` (MetaSchedule
    hands the exception back as a RuntimeError)."""

    def __init__(self, measurer, work_dir: str):
        super().__init__()
        self.measurer = measurer
        self.work_dir = work_dir
        self.lost: UserError | None = None

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        if not any(built.error_msg is None and ran.error_msg is not None
                   for built, ran in zip(builder_results, runner_results)):
            return
        why = self.measurer.device_lost()
        if why is not None:
            self.lost = UserError(
                f"the {self.measurer.device_type} device disappeared while tuning{why}; the "
                f"trials measured before are in {self.work_dir} (this round's are not)")
            raise self.lost


@derived_object
class DatabaseCheck(PyMeasureCallback):
    """A MetaSchedule measure callback after MetaSchedule's own, which commit each round to the
    JSON database: it checks that the database's files on disk hold every committed record, as
    TVM's writer reports no failed write (a full disk leaves a line cut off, which no later
    read parses). If not, it cuts the files back to the records checked before this round and
    stops the tuning, keeping the reason in `lost`."""

    def __init__(self, database, work_dir: str):
        super().__init__()
        self.database = database
        self.work_dir = work_dir
        self.paths = [os.path.join(work_dir, name) for name in (RECORDS_FILE, WORKLOADS_FILE)]
        self.checked = {path: _size(path) for path in self.paths}  # bytes known to be whole
        self.records = _count_lines(self.paths[0])
        self.lost: UserError | None = None

    def apply(self, task_scheduler, task_id, measure_candidates, builder_results,
              runner_results) -> None:
        tails = {path: _tail(path, self.checked[path]) for path in self.paths}
        records = self.records + tails[self.paths[0]].count(b"\n")
        if all(not t or t.endswith(b"\n") for t in tails.values()) and \
                records == len(self.database):
            for path, tail in tails.items():
                self.checked[path] += len(tail)
            self.records = records
            return
        for path in self.paths:  # back to the whole records of the rounds before
            if os.path.exists(path):
                os.truncate(path, self.checked[path])
        self.lost = UserError(
            f"cannot write the tuning database in {self.work_dir} (no space left on the disk, "
            f"or the folder is not writable): the {self.records} trials committed before this "
            "round are kept there, whole; free space, then run again")
        raise self.lost


def _size(path: str) -> int:
    return os.path.getsize(path) if os.path.exists(path) else 0


def _tail(path: str, start: int) -> bytes:
    """The bytes of `path` from `start` on (none if there is no such file)."""
    if not os.path.exists(path):
        return b""
    with open(path, "rb") as f:
        f.seek(start)
        return f.read()


def _count_lines(path: str) -> int:
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        return sum(chunk.count(b"\n") for chunk in iter(lambda: f.read(1 << 20), b""))


@contextlib.contextmanager
def _tuning(target, tuner: str, trials: int, work_dir: str, measurer, inputs: SearchInputs,
            progress: bool, desc: str):
    """What every MetaSchedule tuning call here shares: the checks, the tensor intrinsics of
    the target only, the tuner's (strategy, cost model), the JSON database in `work_dir`,
    quiet and robust logging, and the measure callbacks: the device check first
    (`DeviceCheck`), the database check after MetaSchedule's own (`DatabaseCheck`), a progress
    bar last. Yields the keyword arguments for `tune_tir` and `tune_relax`.

    Raises:
        UserError: the device disappeared during the tuning, or the database could not be
            written.
    """
    from tvm.s_tir import meta_schedule as ms

    from datagen.tvm_env import load_tensor_intrinsics, metaschedule_logging

    if trials < 1:
        raise UserError(f"the trial budget must be at least 1, not {trials}")
    load_tensor_intrinsics(target.kind.name)  # before MetaSchedule imports every backend's
    strategy, cost_model = make_search(tuner, inputs)
    os.makedirs(work_dir, exist_ok=True)
    check_timing(work_dir, measurer.protocol)
    logging.getLogger(METASCHEDULE_LOGGER).setLevel(logging.WARNING)  # log files keep all
    database = ms.Database.create("json", work_dir=work_dir, module_equality="structural")
    checks = [DeviceCheck(measurer, work_dir), DatabaseCheck(database, work_dir)]
    bar = ProgressBar(trials, desc or tuner, progress)
    try:
        with metaschedule_logging():
            yield {"strategy": strategy, "cost_model": cost_model, "seed": inputs.seed,
                   "database": database,
                   "measure_callbacks": [checks[0], *ms.MeasureCallback.create("default"),
                                         checks[1], bar]}
    except Exception:
        for check in checks:
            if check.lost is not None:
                raise check.lost from None
        raise
    finally:
        bar.close()


def _timing_name(protocol: dict) -> str:
    """"cold" or "hot" where `protocol` is one of the two `tune run --timing` gives, else the
    protocol itself."""
    from datagen.defaults import COLD_PROTOCOL, DEFAULT_PROTOCOL

    for name, known in (("cold", COLD_PROTOCOL), ("hot", DEFAULT_PROTOCOL)):
        if protocol == {**DEFAULT_PROTOCOL, **known}:
            return name
    return json.dumps(protocol, sort_keys=True)


def check_timing(work_dir: str, protocol: dict) -> None:
    """Record in `work_dir` how its candidates are timed (`TIMING_FILE`), or check that a
    resumed run times them as the run before it did: the database does not say, and hot and
    cold latencies in one database would be compared as one. A folder whose database predates
    the file is resumed unchecked (and stays without one).

    Raises:
        UserError: `work_dir` was tuned with another timing, or its timing file is unreadable.
    """
    from datagen.errors import atomic_path

    path = os.path.join(work_dir, TIMING_FILE)
    if os.path.exists(path):
        try:
            with open(path) as f:
                before = json.load(f)["protocol"]
        except (OSError, ValueError, KeyError, TypeError) as err:
            raise UserError(f"{path} is unreadable ({err.__class__.__name__}): tune into "
                            "another folder, or delete the file if you know how the run "
                            "before this one timed its candidates") from None
        if before != protocol:
            was, now = _timing_name(before), _timing_name(protocol)
            raise UserError(f"{work_dir} holds candidates timed {was}, and this run times them "
                            f"{now}: resume it with the same timing (tune run --timing), or "
                            "tune into another folder")
        return
    if _size(os.path.join(work_dir, RECORDS_FILE)) > 0:
        return  # measured before timings were recorded: unknown, left as it is
    with atomic_path(path, ".json") as tmp, open(tmp, "w") as f:
        json.dump({"protocol": protocol}, f, sort_keys=True)


def tune_workload(mod, target, tuner: str, trials: int, work_dir: str, measurer,
                  inputs: SearchInputs = SearchInputs(),
                  trials_per_iter: int = DEFAULT_TRIALS_PER_ITER, progress: bool = False,
                  desc: str = ""):
    """Tune one TIR workload into the JSON database in `work_dir`; returns the database."""
    from tvm.s_tir import meta_schedule as ms

    with _tuning(target, tuner, trials, work_dir, measurer, inputs, progress, desc) as search:
        return ms.tune_tir(mod, target, work_dir, max_trials_global=trials,
                           num_trials_per_iter=min(trials_per_iter, trials),
                           builder=measurer.builder, runner=measurer.runner,
                           num_tuning_cores=inputs.threads or "physical", **search)


def task_count(mod, target, params=None) -> int:
    """How many tasks MetaSchedule extracts from a relax module (what `tune_network` tunes)."""
    from tvm.s_tir import meta_schedule as ms

    return len(ms.relax_integration.extract_tasks(mod, target, params))


def tune_network(mod, params, target, tuner: str, trials: int, work_dir: str, measurer,
                 inputs: SearchInputs = SearchInputs(),
                 trials_per_iter: int = DEFAULT_TRIALS_PER_ITER, progress: bool = False):
    """Tune every task of a relax module (trials spread by task weight); returns the database.

    Raises:
        UserError: the budget is below one round per task (MetaSchedule's task scheduler gives
            each task a round in turn and stops at the budget: the tasks after it would be
            built untuned), checked before anything is written.
    """
    from tvm.s_tir import meta_schedule as ms

    tasks = task_count(mod, target, params)
    if trials < tasks * trials_per_iter:
        raise UserError(f"{trials} trials are below one round per task: the network has {tasks} "
                        f"tasks and a round measures {trials_per_iter}, so give at least "
                        f"{tasks * trials_per_iter} trials, or measure fewer per round")
    with _tuning(target, tuner, trials, work_dir, measurer, inputs, progress, tuner) as search:
        return ms.relax_integration.tune_relax(
            mod, params, target, work_dir, max_trials_global=trials,
            num_trials_per_iter=trials_per_iter, builder=measurer.builder,
            runner=measurer.runner, **search)


def apply_database(database, mod, target):
    """`mod` (a relax module lowered as `datagen.torch_import.relax_module` does) with every
    PrimFunc the database has a record for replaced by its best schedule.

    MetaSchedule's `compile_relax` re-runs legalisation and fusion first, which re-annotates
    already-fused functions, so most records no longer match and those tasks are silently built
    untuned; here the database applies to the very functions `tune_network` tuned.
    """
    import tvm
    from tvm import relax

    with target, database, tvm.transform.PassContext(opt_level=3):
        return relax.transform.MetaScheduleApplyDatabase()(mod)


def compile_network(database, mod, target):
    """A relax `VMExecutable` of `mod` built with the database's schedules."""
    from tvm import relax

    with target:
        return relax.build(apply_database(database, mod, target), target=target)


def read_curve(work_dir: str) -> dict[str, list[float]]:
    """Measured latencies (seconds, inf for failures) per workload, in measurement order.

    Keys are the workloads' structural hashes as the database stores them (one per task).
    """
    path = os.path.join(work_dir, RECORDS_FILE)
    workloads = []
    if os.path.exists(os.path.join(work_dir, WORKLOADS_FILE)):
        with open(os.path.join(work_dir, WORKLOADS_FILE)) as f:
            workloads = [json.loads(line)[0] for line in f if line.strip()]
    curves: dict[str, list[float]] = {}
    if not os.path.exists(path):
        return curves
    with open(path) as f:
        for line in f:
            if not line.strip():
                continue
            index, record = json.loads(line)
            latency = run_latency(record[1])
            key = str(workloads[index]) if index < len(workloads) else str(index)
            curves.setdefault(key, []).append(math.inf if latency is None else latency)
    return curves


def best_so_far(latencies: list[float]) -> np.ndarray:
    """Best latency after each trial (inf until the first success)."""
    return np.minimum.accumulate(np.array(latencies, dtype=float)) if latencies else np.zeros(0)
