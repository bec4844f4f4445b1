"""The collection loop: sample, build, measure and commit schedules, resumably.

Each workload is collected in rounds of `batch_size` candidates. The first `random_rounds`
rounds are random design-space samples; later rounds evolve `evolve_fraction` of the batch
from the `top_k` fastest schedules measured so far and fill the rest at random. A round's
seeds derive from (seed, workload, round), and a round is committed as one shard, so a run
that is killed and started again replays exactly the rounds it had not committed.
"""

from __future__ import annotations

import dataclasses
import datetime
import json
import sys
import time

from datagen import records
from datagen.errors import UserError
from datagen.measure import (DEFAULT_RUN_TIMEOUT_SEC, OK, Measurer, MeasureResult, Tracker,
                             latency_stats)
from datagen.sampler import Candidate, ScheduleSampler, derive_seed
from datagen.tvm_env import describe_target, host_cpu_model, target_json, versions
from datagen.workloads import Workload

DEFAULT_PER_WORKLOAD = 32
DEFAULT_BATCH_SIZE = 16
DEFAULT_EVOLVE_FRACTION = 0.5
# a candidate whose repeats spread more than this is measured again at the end of its round
DEFAULT_RETRY_CV = 0.10
STATE_COLUMNS = ["workload_key", "target", "trace_hash", "status", "latency_median", "trace",
                 "round"]


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
        num_threads, build_workers, build_timeout, run_timeout: see `Measurer`.
        draw_workers: processes that draw the rounds of a packed batch (default: the cores).
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


def load_state(out: str, target_text: str) -> dict[str, WorkloadState]:
    """Per-workload state of what is committed in `out` for this target.

    Raises:
        UserError: `out` holds records of another target (a dataset holds one: a model learns
            one target's latencies, and a host with another CPU would start every workload
            again beside them).
    """
    frame = records.read_records(out, columns=STATE_COLUMNS)
    theirs = sorted(set(frame.target) - {target_text})
    if theirs:
        raise UserError(
            f"{out} holds records measured for {', '.join(describe_target(t) for t in theirs)}, "
            f"not {describe_target(target_text)} (this collection's target; an llvm target "
            "without mcpu is this host's CPU): a dataset holds one target, so collect into "
            "another folder (--out), or where that target runs")
    states: dict[str, WorkloadState] = {}
    for row in frame.itertuples(index=False):
        st = states.setdefault(row.workload_key, WorkloadState())
        st.count += 1
        st.rounds = max(st.rounds, int(row.round) + 1)
        st.seen.add(row.trace_hash)
        if row.status == OK:
            st.measured.append((float(row.latency_median), row.trace))
    return states


def measurement_columns(res: MeasureResult) -> dict:
    """A record's measurement columns from one candidate's result (and its re-measurement)."""
    lat = res.latencies if res.status == OK else []
    retry = res.retry.latencies if res.retry is not None and res.retry.status == OK else []
    # the label is the measurement that spread less
    label = min([m for m in (lat, retry) if m] or [lat],
                key=lambda m: latency_stats(m)["latency_cv"])
    run_secs = res.run_secs + (res.retry.run_secs if res.retry is not None else 0.0)
    return {"status": res.status, "error": res.error, "latencies": res.latencies,
            "retry_latencies": retry, **latency_stats(label), "build_secs": res.build_secs,
            "run_secs": run_secs}


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


def collect(cfg: CollectConfig, progress: bool = True) -> CollectSummary:
    """Collect until every workload has `per_workload` committed candidates.

    Breadth first: the next round always goes to the workload with the fewest committed
    candidates (the earliest listed among equals), so a collection stopped and started any
    number of times covers every workload before any goes deeper.
    """
    from tqdm import tqdm

    start = time.perf_counter()
    target_text = target_json(cfg.target)
    # the measurer checks target and tracker before anything is written
    measurer = Measurer(cfg.target, cfg.protocol, cfg.tracker, cfg.num_threads,
                        cfg.build_workers, cfg.build_timeout, cfg.run_timeout)
    writer = None
    try:
        writer = records.ShardWriter(cfg.out)
        states = load_state(cfg.out, target_text)  # refuses a dataset of another target
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
    summary = CollectSummary()
    bar = tqdm(total=total, initial=done, unit="cand", disable=not progress, file=sys.stderr,
               dynamic_ncols=True, smoothing=0.05)
    samplers: dict[str, tuple[ScheduleSampler, str]] = {}  # built on first use, then kept
    order = {w.key: i for i, w in enumerate(cfg.workloads)}
    pending = [w for w in cfg.workloads
               if states.setdefault(w.key, WorkloadState()).count < cfg.per_workload]
    try:
        while pending:  # breadth first: always the workload with the fewest candidates
            w = next_workload(pending, states, order)
            st = states[w.key]
            bar.set_description(w.key[:48])
            if w.key not in samplers:
                samplers[w.key] = (ScheduleSampler(w.mod, cfg.target), w.definition())
            sampler, definition = samplers[w.key]
            n = min(cfg.batch_size, cfg.per_workload - st.count)
            cands = draw_round(sampler, cfg, w.key, st, n)
            if not cands:  # the design space has no unseen schedule left
                summary.exhausted.append(w.key)
                bar.update(cfg.per_workload - st.count)
                pending.remove(w)
                continue
            results = measurer.measure([c.mod for c in cands], cfg.retry_cv)
            rows = [candidate_row(w, definition, c, res, st.rounds, context)
                    for c, res in zip(cands, results)]
            writer.write(rows)
            st.count += len(rows)
            st.rounds += 1
            st.measured += [(r["latency_median"], r["trace"]) for r in rows
                            if r["status"] == OK]
            ok = sum(r["status"] == OK for r in rows)
            summary.committed += len(rows)
            summary.ok += ok
            summary.failed += len(rows) - ok
            bar.set_postfix(ok=summary.ok, failed=summary.failed)
            bar.update(len(rows))
            if st.count >= cfg.per_workload:
                pending.remove(w)
    finally:
        bar.close()
        measurer.close()
        writer.close()
    summary.wall = time.perf_counter() - start
    summary.build_wall, summary.run_wall = measurer.build_wall, measurer.run_wall
    return summary
