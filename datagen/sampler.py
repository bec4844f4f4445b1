"""Draw schedules from MetaSchedule's design space of a workload, at random or by mutation.

Random schedules replay a design-space trace with fresh decisions (what MetaSchedule's
ReplayTrace does); evolved schedules apply one of the space generator's mutators to a measured
parent trace (what EvolutionarySearch does), so the data reaches the fast region too. Every
draw is seeded, and candidates whose trace was already seen are skipped. With several
`threads`, draws are replayed and postprocessed a chunk at a time in parallel (TVM's schedule
code releases the GIL) and accepted in order: the same candidates as drawn one by one.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
from typing import Iterable, Iterator

import numpy as np

from datagen.tvm_env import load_tensor_intrinsics, to_python

# How many draws may fail (postprocessor rejects, duplicate traces) per candidate wanted
# before a round gives up: small design spaces run out of new schedules.
MAX_ATTEMPTS_PER_CANDIDATE = 8
# GPU postprocessors (thread and shared-memory limits) reject most random tilings: 96-99% of
# random dense, conv2d and depthwise schedules for the H100 (softmax: none), about 10 ms a draw
MAX_ATTEMPTS_PER_CANDIDATE_GPU = 256
# A draw stops earlier once this many valid schedules in a row were ones seen before: the space
# (or a parent's neighbourhood) has run out of new schedules. A pool2d of the H100 suite has
# about 70 random ones: the GPU's budget above would spend 136 x 256 draws (11 min) finding none.
# Rejected draws do not count (GPU limits reject most random tilings of large spaces).
MAX_SEEN_IN_A_ROW = 128


@dataclasses.dataclass
class Candidate:
    """A concrete schedule ready to build.

    Args:
        mod: the scheduled IRModule.
        trace_json: the replayable trace, postprocessing included, as JSON text.
        trace_hash: `trace_hash(trace_json)`, the deduplication key.
        origin: "random" or "evolved".
        parent_hash: for evolved candidates, the trace hash of the parent.
        mutator: for evolved candidates, the mutator applied.
        sch: the `Schedule` itself (its trace is what a MetaSchedule database stores).
    """

    mod: object
    trace_json: str
    trace_hash: str
    origin: str
    parent_hash: str = ""
    mutator: str = ""
    sch: object = None


def _canonical(obj):
    if isinstance(obj, bool):
        return int(obj)
    if isinstance(obj, list):
        return [_canonical(x) for x in obj]
    return obj


def trace_to_json(trace) -> str:
    """A trace as JSON text, exactly as it replays."""
    return json.dumps(to_python(trace.as_json()), separators=(",", ":"))


def trace_hash(trace_json: str) -> str:
    """The deduplication key of a trace: SHA-1 of its canonical JSON.

    MetaSchedule's JSON database writes boolean attributes back as 0/1; hashing them as
    integers gives a trace the same key before and after a trip through a database.
    """
    return hash_text(json.dumps(_canonical(json.loads(trace_json)), separators=(",", ":")))


def hash_text(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def derive_seed(*parts) -> int:
    """A 31-bit seed derived from any printable parts (stable across processes and runs)."""
    return int(hashlib.sha256(repr(parts).encode()).hexdigest()[:8], 16) & 0x7FFFFFFF


def replay(mod, trace_json: str):
    """Apply a stored trace (postprocessing included) to `mod`, returning the Schedule."""
    from tvm.s_tir import Schedule, Trace

    sch = Schedule(mod, debug_mask=0)
    Trace.apply_json_to_schedule(json.loads(trace_json), sch)
    return sch


class ScheduleSampler:
    """Samples schedules of one workload for one target.

    Args:
        mod: the workload's IRModule.
        target: a `tvm.target.Target`.
        context: a MetaSchedule `TuneContext` of `mod` whose space generator to use (default:
            a fresh one with the post-order-apply generator).
        threads: threads that replay and postprocess draws in parallel (the candidates do not
            depend on it).
    """

    def __init__(self, mod, target, context=None, threads: int = 1):
        from tvm.s_tir import meta_schedule as ms

        load_tensor_intrinsics(target.kind.name)
        self.mod = mod
        self.target = target
        self.threads = max(1, int(threads))
        self.max_attempts = MAX_ATTEMPTS_PER_CANDIDATE if target.kind.name == "llvm" \
            else MAX_ATTEMPTS_PER_CANDIDATE_GPU
        self.context = context or ms.TuneContext(
            mod=mod,
            target=target,
            space_generator="post-order-apply",
            search_strategy=ms.search_strategy.ReplayTrace(),
            num_threads=1,
        )
        self.spaces = [sch.trace for sch in self.context.generate_design_space()]
        self.postprocs = list(self.context.space_generator.postprocs)
        probs = self.context.space_generator.mutator_probs
        self.mutators = list(probs.keys())
        weights = np.array([float(p) for p in probs.values()])
        self.mutator_probs = weights / weights.sum() if len(weights) else weights

    def __repr__(self) -> str:
        return (f"ScheduleSampler(target={self.target.kind.name}, spaces={len(self.spaces)}, "
                f"mutators={len(self.mutators)})")

    def _finish(self, trace, seed: int):
        """Replay `trace` on a fresh schedule and run the postprocessors; None if rejected."""
        from tvm.s_tir import Schedule

        sch = Schedule(self.mod, seed=seed, debug_mask=0)
        try:
            trace.apply_to_schedule(sch, remove_postproc=True)
            sch.enter_postproc()  # marks where postprocessing starts, as MetaSchedule does
            if not all(p.apply(sch) for p in self.postprocs):
                return None
        except Exception:  # noqa: BLE001  (TVM raises assorted errors for invalid decisions)
            return None
        return sch

    def _accept(self, sch, seen: set[str], **fields) -> Candidate | None:
        text = trace_to_json(sch.trace)
        digest = trace_hash(text)
        if digest in seen:
            return None
        seen.add(digest)
        return Candidate(mod=sch.mod, trace_json=text, trace_hash=digest, sch=sch, **fields)

    def _take(self, finished: Iterator[tuple], n: int, seen: set[str], fields) -> list[Candidate]:
        """Up to `n` new candidates from (schedule or None, info) pairs, in order; stops early
        after `MAX_SEEN_IN_A_ROW` valid schedules in a row that were seen before.
        `fields(info)` gives a candidate's origin fields."""
        out: list[Candidate] = []
        seen_in_a_row = 0
        for sch, info in finished:
            if sch is None:
                continue
            cand = self._accept(sch, seen, **fields(info))
            if cand is None:
                seen_in_a_row += 1
                if seen_in_a_row >= MAX_SEEN_IN_A_ROW:
                    break
                continue
            seen_in_a_row = 0
            out.append(cand)
            if len(out) == n:
                break
        return out

    def _finished(self, attempts: Iterable[tuple]) -> Iterator[tuple]:
        """(`_finish(trace, seed)`, info) for each (trace, seed, info) of `attempts`, in order;
        with several threads, `4 * threads` attempts at a time in parallel (so at most one
        such chunk is drawn in vain once the caller has what it wants)."""
        attempts = iter(attempts)
        if self.threads == 1:
            for trace, seed, info in attempts:
                yield self._finish(trace, seed), info
            return
        from concurrent.futures import ThreadPoolExecutor
        from itertools import islice

        with ThreadPoolExecutor(self.threads) as pool:
            while chunk := list(islice(attempts, 4 * self.threads)):
                yield from zip(pool.map(lambda a: self._finish(a[0], a[1]), chunk),
                               (info for _, _, info in chunk))

    def random(self, n: int, seed: int, seen: set[str]) -> list[Candidate]:
        """Up to `n` new random schedules; `seen` (trace hashes) is updated."""
        from tvm.s_tir import Trace

        rng = np.random.default_rng(seed)
        if n <= 0 or not self.spaces:
            return []

        def attempts():
            for _ in range(n * self.max_attempts):
                space = self.spaces[rng.integers(len(self.spaces))]
                yield Trace(space.insts, {}), int(rng.integers(1, 2**31 - 1)), None

        return self._take(self._finished(attempts()), n, seen, lambda _: {"origin": "random"})

    def evolve(self, parents: list[str], n: int, seed: int, seen: set[str]) -> list[Candidate]:
        """Up to `n` new schedules, each one mutation of a parent trace (JSON text)."""
        from tvm.s_tir.meta_schedule import _ffi_api

        if not parents or not self.mutators or n <= 0:
            return []
        rng = np.random.default_rng(seed)
        traces = [replay(self.mod, p).trace for p in parents]
        hashes = [trace_hash(p) for p in parents]

        def attempts():  # mutations stay in this thread, in order (a failed one draws no seed)
            for _ in range(n * self.max_attempts):
                i = int(rng.integers(len(traces)))
                mutator = self.mutators[rng.choice(len(self.mutators), p=self.mutator_probs)]
                mutated = _ffi_api.MutatorApply(mutator, traces[i],
                                                int(rng.integers(1, 2**31 - 1)))
                if mutated is not None:
                    yield mutated, int(rng.integers(1, 2**31 - 1)), (i, mutator)

        return self._take(self._finished(attempts()), n, seen, lambda info: {
            "origin": "evolved", "parent_hash": hashes[info[0]],
            "mutator": str(info[1]).rsplit(".", 1)[-1]})
