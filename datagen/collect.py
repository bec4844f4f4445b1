"""The collection loop: sample, build, measure and commit schedules, resumably.

Each workload is collected in rounds of `batch_size` candidates. The first `random_rounds`
rounds are random design-space samples; later rounds evolve `evolve_fraction` of the batch
from the `top_k` fastest schedules measured so far and fill the rest at random. A round's
seeds derive from (seed, workload, round), and a round is committed as one shard, so a run
that is killed and started again replays exactly the rounds it had not committed.

Where the programs run on a device that is not this host's CPU (a GPU here, or any device
behind an RPC tracker), the collection overlaps (`overlap`): while the device measures one
wave of rounds (one round of each of up to `draw_workers` workloads), the next wave is drawn
in worker processes and built on this host's other cores. A round's candidates depend only
on its own workload's committed rounds, so the records are the same as one round at a time.
On this host's CPU, drawing and building would take the cores being timed: one round at a
time there.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import os
import sys
import time

from datagen import records
from datagen.defaults import (DEFAULT_BATCH_SIZE, DEFAULT_EVOLVE_FRACTION, DEFAULT_PER_WORKLOAD,
                              DEFAULT_RETRY_CV)
from datagen.devices import host_cpu_model
from datagen.errors import UserError
from datagen.measure import (DEFAULT_RUN_TIMEOUT_SEC, OK, Measurer, MeasureResult, Tracker,
                             device_name, label_stats)
from datagen.sampler import Candidate, ScheduleSampler, derive_seed
from datagen.tvm_env import describe_target, target_json, versions
from datagen.workloads import Workload

STATE_COLUMNS = ["workload_key", "target", "device", "trace_hash", "status", "latency_median",
                 "trace", "round"]
PARALLEL_DRAW_MIN_WORKLOADS = 8  # fewer are drawn in this process (see `draw_rounds`)


@dataclasses.dataclass
class CollectConfig:
    """What to collect and how.

    Args:
        out: dataset folder.
        workloads: workloads to collect.
        target: `tvm.target.Target` to build for.
        per_workload: candidates to measure per workload (failures count).
        batch_size: candidates per round (one shard each).
        evolve_fraction: share of a round drawn by mutating the best measured schedules.
        random_rounds: leading rounds that are purely random.
        top_k: how many of the fastest schedules serve as parents.
        seed: collection seed.
        protocol: measurement protocol overrides (see `datagen.measure.DEFAULT_PROTOCOL`).
        tracker: measure through this RPC tracker.
        retry_cv: re-measure, at the end of its round, a candidate whose repeats spread more
            than this (coefficient of variation); both measurements are kept. None: never.
        num_threads, build_workers, build_timeout, run_timeout: see `Measurer` (with
            `overlap`, build_workers defaults to every core but one: that one measures).
        draw_workers: processes that draw rounds: those of a packed batch (default: the
            cores), and with `overlap` each wave's (default: every core but one); a wave is
            one round of each of up to this many workloads.
        overlap: draw and build the next wave while the device measures this one. None: when
            the device is not this host's CPU (a GPU, or a tracker's device).
    """

    out: str
    workloads: list[Workload]
    target: object
    per_workload: int = DEFAULT_PER_WORKLOAD
    batch_size: int = DEFAULT_BATCH_SIZE
    evolve_fraction: float = DEFAULT_EVOLVE_FRACTION
    random_rounds: int = 1
    top_k: int = 8
    seed: int = 0
    protocol: dict | None = None
    tracker: Tracker | None = None
    num_threads: int | None = None
    build_workers: int | None = None
    build_timeout: float | None = None
    run_timeout: float = DEFAULT_RUN_TIMEOUT_SEC
    retry_cv: float | None = DEFAULT_RETRY_CV
    draw_workers: int | None = None
    overlap: bool | None = None

    def overlapped(self) -> bool:
        """Whether `collect` overlaps drawing and building with measuring (see `overlap`)."""
        if self.overlap is not None:
            return self.overlap
        return self.tracker is not None or self.target.kind.name != "llvm"


@dataclasses.dataclass
class WorkloadState:
    """What is already committed for one workload (rebuilt from the shards on resume)."""

    count: int = 0
    rounds: int = 0
    seen: set = dataclasses.field(default_factory=set)
    measured: list = dataclasses.field(default_factory=list)  # (median seconds, trace json)

    def parents(self, k: int) -> list[str]:
        return [trace for _, trace in sorted(self.measured, key=lambda m: m[0])[:k]]


@dataclasses.dataclass
class CollectSummary:
    """What one `collect` call did, and where its wall time went (seconds)."""

    committed: int = 0
    ok: int = 0
    failed: int = 0
    exhausted: list = dataclasses.field(default_factory=list)
    wall: float = 0.0
    build_wall: float = 0.0
    run_wall: float = 0.0
    draw_wall: float = 0.0
    overlapped: bool = False  # building (and drawing) ran beside measuring
    idle_wall: float = 0.0  # overlapped: the measuring waited for a wave drawn and built


def load_state(out: str, target_text: str, device: dict | None = None
               ) -> dict[str, WorkloadState]:
    """Per-workload state of what is committed in `out` for this target (and `device`, the
    measuring GPU: see `refuse_other_gpu`).

    Raises:
        UserError: `out` holds records of another target (a dataset holds one: a model learns
            one target's latencies, and a host with another CPU would start every workload
            again beside them), or measured on another GPU.
    """
    frame = records.read_records(out, columns=STATE_COLUMNS)
    theirs = sorted(set(frame.target) - {target_text})
    if theirs:
        raise UserError(
            f"{out} holds records measured for {', '.join(describe_target(t) for t in theirs)}, "
            f"not {describe_target(target_text)} (this collection's target; an llvm target "
            "without mcpu is this host's CPU): a dataset holds one target, so collect into "
            "another folder (--out), or where that target runs")
    if device is not None:
        refuse_other_gpu(out, frame.device, device, "collect into another folder (--out)")
    states: dict[str, WorkloadState] = {}
    for row in frame.itertuples(index=False):
        st = states.setdefault(row.workload_key, WorkloadState())
        st.count += 1
        st.rounds = max(st.rounds, int(row.round) + 1)
        st.seen.add(row.trace_hash)
        if row.status == OK:
            st.measured.append((float(row.latency_median), row.trace))
    return states


def refuse_other_gpu(dataset: str, recorded, device: dict, instead: str) -> None:
    """Refuse to add `device`'s measurements to a dataset whose records name another GPU.

    One GPU target tag fits several GPUs (an H200 runs `nvidia/nvidia-h100`'s kernels), so
    unlike a CPU's target it does not say which device measured; a dataset holds one device's
    latencies. `recorded`: the dataset's `device` column (JSON; "" where not recorded).
    `instead`: what to do, for the error."""
    here = device_name(device)
    if device.get("kind") == "cpu" or here is None:
        return
    theirs = set()
    for text in set(recorded):
        try:
            there = device_name(json.loads(text)) if text else None
        except ValueError:
            there = None
        if there is not None and there != here:
            theirs.add(there)
    if theirs:
        raise UserError(f"{dataset} holds records measured on {', '.join(sorted(theirs))}, not "
                        f"on {here} (this measurement's device): a dataset holds one device's "
                        f"latencies, so {instead}")


def measurement_columns(res: MeasureResult) -> dict:
    """A record's measurement columns from one candidate's result (and its re-measurement)."""
    retry = res.retry.latencies if res.retry is not None and res.retry.status == OK else []
    run_secs = res.run_secs + (res.retry.run_secs if res.retry is not None else 0.0)
    return {"status": res.status, "error": res.error, "latencies": res.latencies,
            "retry_latencies": retry, **label_stats(res.status, res.latencies, retry),
            "build_secs": res.build_secs, "run_secs": run_secs}


def candidate_row(w: Workload, definition: str, cand: Candidate, res: MeasureResult,
                  round_: int, context: dict) -> dict:
    """One record: the workload, the candidate, its measurement and the collection context."""
    return {
        **context,
        "workload_key": w.key, "family": w.family, "workload_params": w.params_json,
        "workload_ir": definition, "network": w.network, "workload_weight": w.weight,
        "trace": cand.trace_json, "trace_hash": cand.trace_hash, "origin": cand.origin,
        "parent_hash": cand.parent_hash, "mutator": cand.mutator, "round": round_,
        **measurement_columns(res),
        "collected_at": datetime.datetime.now(datetime.timezone.utc),
    }


def draw_round(sampler: ScheduleSampler, cfg: CollectConfig, key: str, st: WorkloadState,
               n: int) -> list[Candidate]:
    """The candidates of the next round of one workload (deterministic given the state)."""
    r = st.rounds
    n_evolve = round(n * cfg.evolve_fraction) if r >= cfg.random_rounds and st.measured else 0
    cands = sampler.evolve(st.parents(cfg.top_k), n_evolve,
                           derive_seed(cfg.seed, key, r, "evolve"), st.seen)
    cands += sampler.random(n - len(cands), derive_seed(cfg.seed, key, r, "random"), st.seen)
    return cands


def next_workload(pending: list[Workload], states: dict[str, WorkloadState],
                  order: dict[str, int]) -> Workload:
    """Breadth first: the pending workload with the fewest committed candidates, the earliest
    in `order` among equals."""
    return min(pending, key=lambda w: (states[w.key].count, order[w.key]))


def next_wave(pending: list[Workload], states: dict[str, WorkloadState],
              order: dict[str, int], size: int, busy: set[str]) -> list[Workload]:
    """Breadth first, as `next_workload`: the `size` pending workloads with the fewest
    committed candidates, leaving out those whose round is still in flight (`busy`)."""
    free = [w for w in pending if w.key not in busy]
    return sorted(free, key=lambda w: (states[w.key].count, order[w.key]))[:size]


def usable_cores() -> int:
    return len(os.sched_getaffinity(0))


def _draw_elsewhere(job: tuple) -> list[tuple]:
    """One workload's next round, drawn in a worker process: the candidates as
    (scheduled module as JSON, trace JSON, trace hash, origin, parent hash, mutator)."""
    import tvm

    from datagen.tvm_env import make_target

    definition, target_text, cfg, key, st, n, threads = job
    sampler = ScheduleSampler(tvm.ir.load_json(definition), make_target(json.loads(target_text)),
                              threads=threads)
    return [(tvm.ir.save_json(c.mod), c.trace_json, c.trace_hash, c.origin, c.parent_hash,
             c.mutator) for c in draw_round(sampler, cfg, key, st, n)]


def _die_with_parent() -> None:
    """Draw worker initializer: end this process when the process that forked it ends (the
    fork server, which ends with the collector, even one killed by SIGKILL; Linux's
    PR_SET_PDEATHSIG, elsewhere nothing), so no idle worker outlives it."""
    import ctypes
    import signal

    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)
    except (OSError, AttributeError):
        pass


class RoundDrawer:
    """Draws workloads' next rounds, each exactly as `draw_round` draws it: in this process
    (samplers kept), or in `workers` processes that live as long as the drawer, forked from the
    server that imported TVM once (`datagen.fork_pool`; each imports the target's tensor
    intrinsics: 15-20 s for CUDA on 2 cores). The
    rounds drawn at once share `cores` threads (a GPU's limits reject most random draws)."""

    def __init__(self, cfg: CollectConfig, workers: int, cores: int = 1):
        from concurrent.futures import ProcessPoolExecutor

        from datagen.fork_pool import fork_context

        self.cfg = cfg
        self.cores = max(1, cores)
        self.workers = workers
        self.samplers: dict[str, ScheduleSampler] = {}
        self.pool = None
        if workers >= 2:
            self.slim = dataclasses.replace(cfg, workloads=[], target=None, tracker=None)
            self.target_text = target_json(cfg.target)
            # forked from the fork server, which imported TVM and runs nothing (a forked copy
            # of a process that runs TVM's thread pools can deadlock)
            self.pool = ProcessPoolExecutor(workers, mp_context=fork_context(),
                                            initializer=_die_with_parent)

    def draw(self, jobs: list[tuple], bar=None) -> list[list[Candidate]]:
        """Per (workload, its state, candidates wanted) job, the candidates of its next round.
        Drawn here, a round adds its trace hashes to the state's `seen`; drawn elsewhere, not."""
        import tvm

        rounds = []
        if self.pool is None:
            for w, st, n in jobs:
                if w.key not in self.samplers:
                    self.samplers[w.key] = ScheduleSampler(w.mod, self.cfg.target,
                                                           threads=self.cores)
                rounds.append(draw_round(self.samplers[w.key], self.cfg, w.key, st, n))
                if bar is not None:
                    bar.update()
            return rounds
        threads = max(1, self.cores // max(1, min(len(jobs), self.workers)))
        futures = [self.pool.submit(_draw_elsewhere, (w.definition(), self.target_text,
                                                      self.slim, w.key, st, n, threads))
                   for w, st, n in jobs]
        for future in futures:
            rounds.append([Candidate(tvm.ir.load_json(mod), *rest)
                           for mod, *rest in future.result()])
            if bar is not None:
                bar.update()
        return rounds

    def close(self) -> None:
        if self.pool is not None:
            self.pool.shutdown(wait=False, cancel_futures=True)


def draw_rounds(cfg: CollectConfig, states: dict[str, WorkloadState],
                progress: bool = True) -> list[tuple]:
    """The next round of every unfinished workload, in workload order: (workload, definition,
    candidate, round) for each candidate.

    Workloads are drawn in `cfg.draw_workers` processes, each round exactly as `draw_round`
    draws it here. By default that is the cores, or this process alone for fewer than
    `PARALLEL_DRAW_MIN_WORKLOADS` workloads: a new process first imports TVM and the target's
    tensor intrinsics (15-20 s for CUDA), while one workload's round of 16 CUDA candidates
    draws in about 3 s (measured on 2 cores: 18 workloads in 54 s here, 44 s in 2 processes).
    """
    from tqdm import tqdm

    jobs = []  # (workload, its state, candidates to draw)
    for w in cfg.workloads:
        st = states.get(w.key, WorkloadState())
        if st.count < cfg.per_workload:
            jobs.append((w, st, min(cfg.batch_size, cfg.per_workload - st.count)))
    workers = cfg.draw_workers or (usable_cores() if len(jobs) >= PARALLEL_DRAW_MIN_WORKLOADS
                                   else 1)
    drawer = RoundDrawer(cfg, min(workers, len(jobs)), usable_cores())
    try:
        with tqdm(total=len(jobs), desc="draw", unit="wl", disable=not progress) as bar:
            rounds = drawer.draw(jobs, bar)
    finally:
        drawer.close()
    return [(w, w.definition(), c, st.rounds) for (w, st, _), cands in zip(jobs, rounds)
            for c in cands]


class _Collection:
    """One `collect` call's state: the workloads' committed rounds, the shard writer, the
    progress bar and the summary."""

    def __init__(self, cfg: CollectConfig, measurer: Measurer, writer, states: dict,
                 context: dict, bar, stop):
        self.cfg, self.measurer, self.writer, self.stop = cfg, measurer, writer, stop
        measurer.stop = stop
        self.states, self.context, self.bar = states, context, bar
        self.summary = CollectSummary()
        self.order = {w.key: i for i, w in enumerate(cfg.workloads)}
        self.pending = [w for w in cfg.workloads
                        if states.setdefault(w.key, WorkloadState()).count < cfg.per_workload]
        self.definitions: dict[str, str] = {}

    def wanted(self, w: Workload) -> int:
        """Candidates of `w`'s next round."""
        return min(self.cfg.batch_size, self.cfg.per_workload - self.states[w.key].count)

    def exhausted(self, w: Workload) -> None:
        """`w`'s design space has no unseen schedule left."""
        self.summary.exhausted.append(w.key)
        self.bar.update(self.cfg.per_workload - self.states[w.key].count)
        self.pending.remove(w)

    def commit(self, w: Workload, cands: list[Candidate], results: list[MeasureResult]) -> None:
        """Write one measured round of `w` as a shard and update its state."""
        st = self.states[w.key]
        if w.key not in self.definitions:
            self.definitions[w.key] = w.definition()
        rows = [candidate_row(w, self.definitions[w.key], c, res, st.rounds, self.context)
                for c, res in zip(cands, results)]
        self.writer.write(rows)
        st.count += len(rows)
        st.rounds += 1
        st.seen.update(c.trace_hash for c in cands)
        st.measured += [(r["latency_median"], r["trace"]) for r in rows if r["status"] == OK]
        ok = sum(r["status"] == OK for r in rows)
        self.summary.committed += len(rows)
        self.summary.ok += ok
        self.summary.failed += len(rows) - ok
        self.bar.set_postfix(ok=self.summary.ok, failed=self.summary.failed)
        self.bar.update(len(rows))
        if st.count >= self.cfg.per_workload:
            self.pending.remove(w)

    def check_stop(self) -> None:
        if self.stop is not None and self.stop.is_set():
            raise KeyboardInterrupt

    def wait(self, future):
        """`future`'s result, giving up when `stop` is set (checked twice a second)."""
        from concurrent.futures import wait

        while not wait([future], timeout=0.5).done:
            self.check_stop()
        return future.result()

    def one_round_at_a_time(self) -> None:
        """Draw, build, measure and commit one round, then the next (breadth first)."""
        samplers: dict[str, ScheduleSampler] = {}  # built on first use, then kept
        while self.pending:
            self.check_stop()
            w = next_workload(self.pending, self.states, self.order)
            self.bar.set_description(w.key[:48])
            if w.key not in samplers:
                # drawn before the round is measured, not while: every core may draw
                samplers[w.key] = ScheduleSampler(w.mod, self.cfg.target, threads=usable_cores())
            start = time.perf_counter()
            cands = draw_round(samplers[w.key], self.cfg, w.key, self.states[w.key],
                               self.wanted(w))
            self.summary.draw_wall += time.perf_counter() - start
            if not cands:
                self.exhausted(w)
                continue
            self.commit(w, cands, self.measurer.measure([c.mod for c in cands],
                                                        self.cfg.retry_cv))

    def overlapped(self, workers: int) -> None:
        """Measure one wave while a thread draws and builds the next (see the module doc)."""
        from concurrent.futures import ThreadPoolExecutor

        from datagen.builder import remove_artifact

        self.summary.overlapped = True
        drawer = RoundDrawer(self.cfg, workers, max(1, usable_cores() - 1))  # one core measures
        background = ThreadPoolExecutor(1, thread_name_prefix="datagen-prepare")

        def prepare(wave: list[Workload]) -> tuple:
            """Draw and build one round of each workload of `wave`."""
            jobs = [(w, self.states[w.key], self.wanted(w)) for w in wave]
            start = time.perf_counter()
            rounds = drawer.draw(jobs)
            self.summary.draw_wall += time.perf_counter() - start
            built = self.measurer.build([c.mod for cands in rounds for c in cands])
            return wave, rounds, built

        def submit(busy: set[str]):
            wave = next_wave(self.pending, self.states, self.order, workers, busy)
            return background.submit(prepare, wave) if wave else None

        future, built = submit(set()), []
        try:
            while future is not None:
                start = time.perf_counter()
                wave, rounds, built = self.wait(future)
                self.summary.idle_wall += time.perf_counter() - start
                future = submit({w.key for w in wave})  # the next wave, while this one runs
                at = 0
                for w, cands in zip(wave, rounds):
                    mine, at = built[at:at + len(cands)], at + len(cands)
                    if not cands:
                        self.exhausted(w)
                        continue
                    self.bar.set_description(w.key[:48])
                    runs = self.measurer.run_built([c.mod for c in cands], mine, 1,
                                                   self.cfg.retry_cv)
                    self.commit(w, cands, [r[0] for r in runs])
                if future is None and self.pending:  # the rest was busy: go on with it
                    future = submit(set())
        finally:  # a stop or an error: delete what was built but not measured
            if future is not None and future.done() and future.exception() is None:
                built = built + future.result()[2]
            elif future is not None:
                future.cancel()
            for res, _ in built:  # (what was measured is deleted already)
                if res.error_msg is None:
                    remove_artifact(res.artifact_path)
            background.shutdown(wait=False, cancel_futures=True)
            drawer.close()


def collect(cfg: CollectConfig, progress: bool = True, stop=None) -> CollectSummary:
    """Collect until every workload has `per_workload` committed candidates, or until the
    `threading.Event` `stop` is set: then, after the program being measured, it raises
    KeyboardInterrupt with every round committed before kept and the round in flight not.

    Breadth first: the next round always goes to the workload with the fewest committed
    candidates (the earliest listed among equals), so a collection stopped and started any
    number of times covers every workload before any goes deeper. With `cfg.overlapped()`,
    rounds go in waves (see the module doc), each wave breadth first.
    """
    from tqdm import tqdm

    start = time.perf_counter()
    target_text = target_json(cfg.target)
    overlap = cfg.overlapped()
    spare = max(1, usable_cores() - 1)  # with overlap, one core measures
    build_workers = cfg.build_workers or (spare if overlap else None)
    # the measurer checks target and tracker before anything is written
    # overlapped here, the runner loads shared libraries: no link on the measuring path
    measurer = Measurer(cfg.target, cfg.protocol, cfg.tracker, cfg.num_threads,
                        build_workers, cfg.build_timeout, cfg.run_timeout,
                        shared_library=True if overlap and cfg.tracker is None else None)
    writer = None
    try:
        writer = records.ShardWriter(cfg.out)
        # refuses a dataset of another target or GPU
        states = load_state(cfg.out, target_text, measurer.device)
    except BaseException:
        measurer.close()
        if writer is not None:
            writer.close()
        raise
    ver = versions()
    context = {
        "target": target_text, "target_kind": cfg.target.kind.name,
        "cpu_model": host_cpu_model() if cfg.tracker is None else f"rpc:{cfg.tracker.key}",
        "device": json.dumps(measurer.device, sort_keys=True),
        "num_threads": measurer.num_threads, "protocol": json.dumps(measurer.protocol),
        "seed": cfg.seed, "tvm_version": ver["tvm"], "tvm_ffi_version": ver["tvm_ffi"],
        "project_version": ver["project"],
    }
    total = cfg.per_workload * len(cfg.workloads)
    done = sum(min(states.get(w.key, WorkloadState()).count, cfg.per_workload)
               for w in cfg.workloads)
    bar = tqdm(total=total, initial=done, unit="cand", disable=not progress, file=sys.stderr,
               dynamic_ncols=True, smoothing=0.05)
    run = _Collection(cfg, measurer, writer, states, context, bar, stop)
    try:
        if overlap:
            run.overlapped(cfg.draw_workers or spare)
        else:
            run.one_round_at_a_time()
    finally:
        bar.close()
        measurer.close()
        writer.close()
    summary = run.summary
    summary.wall = time.perf_counter() - start
    summary.build_wall, summary.run_wall = measurer.build_wall, measurer.run_wall
    return summary
