"""Draw schedules from MetaSchedule's design space of a workload, at random or by mutation.

Random schedules replay a design-space trace with fresh decisions (what MetaSchedule's
ReplayTrace does); evolved schedules apply one of the space generator's mutators to a measured
parent trace (what EvolutionarySearch does), so the data reaches the fast region too. Every
draw is seeded, and candidates whose trace was already seen are skipped. With several
`threads`, draws are replayed and postprocessed a chunk at a time in parallel (TVM's schedule
code releases the GIL) and accepted in order: the same candidates as drawn one by one. On a
GPU, where the target's thread limits reject most random tilings, a draw whose tiled block
runs on too many or too few threads is rejected as soon as its replay has decided them
(`bounds_prefix`, `breaks_thread_bounds`), not after the rest of the replay and the
postprocessors: the same draws are rejected, sooner (random H100 draws 1.5x faster).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
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


# MultiLevelTiling bounds the threads of a block it tiles for a GPU with these annotations,
# which VerifyGPUCode checks first (its ThreadExtentChecker), after the other postprocessors
THREAD_EXTENT_BOUNDS = ("meta_schedule.thread_extent_low_inclusive",
                        "meta_schedule.thread_extent_high_inclusive")
THREAD_DIMS = {"threadIdx.x": 0, "threadIdx.y": 1, "threadIdx.z": 2}
# postprocessors that leave a tiled block's thread-bound loops and bounds as they are
KEEP_THREAD_BOUNDS = {"DisallowDynamicLoop", "RewriteCooperativeFetch", "RewriteUnboundBlock",
                      "RewriteParallelVectorizeUnroll", "RewriteReductionBlock"}


class _Undecided(Exception):
    """The early check cannot tell: leave the schedule to the postprocessors."""


def breaks_thread_bounds(mod) -> bool:
    """Whether a block of `mod` (a schedule's module before postprocessing) runs on a number of
    threads outside the bounds MetaSchedule annotated it with, the first thing `VerifyGPUCode`
    checks: the product of the extents of the innermost loops bound to threadIdx.x, .y and .z
    around the block. What it rejects, `VerifyGPUCode` rejects after the other postprocessors,
    which leave those loops and annotations as they are (they bind fetches and unbound blocks,
    decompose reductions and annotate unrolling); where it cannot tell (a thread extent that
    is not a constant, a warp-level block), it says no and the postprocessors decide. Of the
    random H100 tilings of dense, batch matmul and the convolutions that `VerifyGPUCode`
    rejects, it rejects 70-94% (the rest break the shared-memory limit), in about 0.2 ms."""
    import tvm
    from tvm.s_tir import SBlockRealize
    from tvm.tirx import AttrStmt, For, IfThenElse, LetStmt, PrimFunc, SeqStmt

    low_key, high_key = THREAD_EXTENT_BOUNDS

    def broken(stmt, threads: tuple) -> bool:
        if isinstance(stmt, For):
            binding = stmt.thread_binding
            dim = THREAD_DIMS.get(str(binding.thread_tag)) if binding is not None else None
            if dim is not None:
                if not isinstance(stmt.extent, tvm.tirx.IntImm):
                    raise _Undecided
                threads = threads[:dim] + (int(stmt.extent.value),) + threads[dim + 1:]
            return broken(stmt.body, threads)
        if isinstance(stmt, SBlockRealize):
            ann = stmt.block.annotations
            if "warp_execution" in ann:
                raise _Undecided
            if low_key in ann and high_key in ann and \
                    not int(ann[low_key]) <= math.prod(threads) <= int(ann[high_key]):
                return True
            return broken(stmt.block.body, threads)
        if isinstance(stmt, SeqStmt):
            return any(broken(s, threads) for s in stmt.seq)
        if isinstance(stmt, IfThenElse):
            return broken(stmt.then_case, threads) or \
                (stmt.else_case is not None and broken(stmt.else_case, threads))
        if isinstance(stmt, (AttrStmt, LetStmt)):
            return broken(stmt.body, threads)
        return False

    try:
        return any(broken(f.body, (1, 1, 1)) for f in mod.functions.values()
                   if isinstance(f, PrimFunc))
    except _Undecided:
        return False


# what the rest of a trace may do to the block whose bounds its prefix set (see `bounds_prefix`)
LEAVE_BLOCK_IN_PLACE = {"Annotate", "Unannotate", "CacheRead", "CacheWrite"}
FIND_BLOCKS = {"GetSBlock", "GetChildBlocks", "GetProducers", "GetConsumers"}


def bounds_prefix(trace) -> int | None:
    """How many leading instructions of `trace` decide the threads of its first tiled block
    (the prefix ends where MultiLevelTiling annotated their bounds), where the rest leaves that
    block where it is: it caches the block's reads and writes and places other blocks under
    its loops, without moving the block or looking it up again. None where there is no such
    block. Replayed with the same seed, the prefix samples the same decisions as the whole
    trace, so a prefix that `breaks_thread_bounds` is a whole trace that does, for 35-40% of
    the replay (the caching and placing that follows costs most)."""
    insts = list(trace.insts)
    for i, inst in enumerate(insts):
        if inst.kind.name == "Annotate" and str(inst.attrs[0]) == THREAD_EXTENT_BOUNDS[1]:
            block = inst.inputs[0]
            for later in insts[i + 1:]:
                name = later.kind.name
                if name == "EnterPostproc":  # what follows is not replayed
                    break
                if name in FIND_BLOCKS or name not in LEAVE_BLOCK_IN_PLACE and any(
                        isinstance(x, type(block)) and x.same_as(block) for x in later.inputs):
                    return None
            return i + 1
    return None


def _thread_bounds_checked_first(postprocs: list) -> bool:
    """Whether `breaks_thread_bounds` may stand in for the postprocessors: they verify GPU code
    and only ones in `KEEP_THREAD_BOUNDS` run before (MetaSchedule's CUDA defaults)."""
    names = [type(p).__name__ for p in postprocs]
    return "VerifyGPUCode" in names and \
        set(names[:names.index("VerifyGPUCode")]) <= KEEP_THREAD_BOUNDS


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
        space: the index of the design space it was drawn from (an evolved one: its parent's,
            where the caller named it; mutations keep a schedule in its space), -1 unknown.
    """

    mod: object
    trace_json: str
    trace_hash: str
    origin: str
    parent_hash: str = ""
    mutator: str = ""
    sch: object = None
    space: int = -1


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
        self.checks_thread_bounds = _thread_bounds_checked_first(self.postprocs)
        self.prefixes = [None] * len(self.spaces)  # per space, its `bounds_prefix` to replay first
        if self.checks_thread_bounds:
            from tvm.s_tir import Trace

            for i, space in enumerate(self.spaces):
                if (cut := bounds_prefix(space)) is not None:
                    self.prefixes[i] = Trace(list(space.insts)[:cut], {})
        probs = self.context.space_generator.mutator_probs
        self.mutators = list(probs.keys())
        weights = np.array([float(p) for p in probs.values()])
        self.mutator_probs = weights / weights.sum() if len(weights) else weights

    def __repr__(self) -> str:
        return (f"ScheduleSampler(target={self.target.kind.name}, spaces={len(self.spaces)}, "
                f"mutators={len(self.mutators)})")

    def _finish(self, trace, seed: int, prefix=None):
        """Replay `trace` on a fresh schedule and run the postprocessors; None if rejected.
        `prefix`: the trace's `bounds_prefix`, replayed first, to reject sooner."""
        from tvm.s_tir import Schedule

        try:
            if prefix is not None:
                sch = Schedule(self.mod, seed=seed, debug_mask=0)
                prefix.apply_to_schedule(sch, remove_postproc=True)
                if breaks_thread_bounds(sch.mod):
                    return None  # what the whole replay would break, for a third of it
            sch = Schedule(self.mod, seed=seed, debug_mask=0)
            trace.apply_to_schedule(sch, remove_postproc=True)
            if self.checks_thread_bounds and breaks_thread_bounds(sch.mod):
                return None  # what VerifyGPUCode rejects, without the postprocessors before it
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
        """(`_finish(*args)`, info) for each (args, info) of `attempts`, in order; with several
        threads, `4 * threads` attempts at a time in parallel (so at most one such chunk is
        drawn in vain once the caller has what it wants)."""
        attempts = iter(attempts)
        if self.threads == 1:
            for args, info in attempts:
                yield self._finish(*args), info
            return
        from concurrent.futures import ThreadPoolExecutor
        from itertools import islice

        with ThreadPoolExecutor(self.threads) as pool:
            while chunk := list(islice(attempts, 4 * self.threads)):
                yield from zip(pool.map(lambda a: self._finish(*a[0]), chunk),
                               (info for _, info in chunk))

    def random(self, n: int, seed: int, seen: set[str]) -> list[Candidate]:
        """Up to `n` new random schedules; `seen` (trace hashes) is updated."""
        from tvm.s_tir import Trace

        rng = np.random.default_rng(seed)
        if n <= 0 or not self.spaces:
            return []

        def attempts():
            for _ in range(n * self.max_attempts):
                i = rng.integers(len(self.spaces))
                yield (Trace(self.spaces[i].insts, {}), int(rng.integers(1, 2**31 - 1)),
                       self.prefixes[i]), int(i)

        return self._take(self._finished(attempts()), n, seen,
                          lambda i: {"origin": "random", "space": i})

    def evolve(self, parents: list[str], n: int, seed: int, seen: set[str],
               depth: int = 1, spaces: list[int] | None = None) -> list[Candidate]:
        """Up to `n` new schedules, each `depth` mutations in a row from a parent trace (JSON
        text): one mutation reaches a parent's neighbours, more reach past them once those are
        all seen. `spaces`: the parents' design spaces, which their children keep."""
        from tvm.s_tir.meta_schedule import _ffi_api

        if not parents or not self.mutators or n <= 0:
            return []
        if depth < 1:
            raise ValueError(f"depth must be at least 1, not {depth}")
        rng = np.random.default_rng(seed)
        traces = [replay(self.mod, p).trace for p in parents]
        hashes = [trace_hash(p) for p in parents]

        def attempts():  # mutations stay in this thread, in order (a failed one draws no seed)
            for _ in range(n * self.max_attempts):
                i = int(rng.integers(len(traces)))
                trace = traces[i]
                for _ in range(depth):
                    mutator = self.mutators[rng.choice(len(self.mutators), p=self.mutator_probs)]
                    trace = _ffi_api.MutatorApply(mutator, trace, int(rng.integers(1, 2**31 - 1)))
                    if trace is None:
                        break
                else:  # (mutations mostly keep the bounds: no prefix)
                    yield (trace, int(rng.integers(1, 2**31 - 1))), (i, mutator)

        return self._take(self._finished(attempts()), n, seen, lambda info: {
            "origin": "evolved", "parent_hash": hashes[info[0]],
            "mutator": str(info[1]).rsplit(".", 1)[-1],
            "space": -1 if spaces is None else spaces[info[0]]})
