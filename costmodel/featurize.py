"""The featuriser: scheduled programs to `ProgramGraph`s, cached in memory and on disk.

A program is lowered for features (`costmodel.lowering`), walked into its typed graph with its
program and warp features (`costmodel.graph_walker`), and given the arrays of each optional
view asked for (`costmodel.views`: MetaSchedule's per-store features, the trace's tokens, the
warp features). The views are described in their modules; this one only runs them and keeps
what they give, keyed by record (`record_key`).

Its public names stay importable from here, wherever they now live: the graph's layout
(`VOCABULARY`, `NODE_FEATURES`, `EDGE_TYPES`, `PROGRAM_FEATURES`, `FEATURIZER_VERSION`), each
view's (`STORE_FEATURES_VERSION`, `NUM_STORE_FEATURES`, `WARP_FEATURES`, ...), `ProgramGraph`,
`lower_for_features`, `build_graph`, `program_features`, `store_features` and `FeaturizeError`.
"""

from __future__ import annotations

import copy
import os
from collections import OrderedDict
from pathlib import Path

import numpy as np

from costmodel import views
from costmodel.graph_walker import FLOP_KINDS, build_graph, program_features  # noqa: F401
from costmodel.lowering import (FeaturizeError, _one_line, feature_passes,  # noqa: F401
                                lower_for_features)
from costmodel.views.graph import (BUFFER, DATAFLOW, EDGE_TYPES, FEATURIZER_VERSION,  # noqa: F401
                                   LOOP_KINDS, NEST, NEST_REV, NODE_FEATURES, NODE_KINDS,
                                   NUM_NODE_FEATURES, OP_KINDS, SEQ, STRIDE_LOOPS, VOCABULARY,
                                   ProgramGraph)
from costmodel.views.program import NUM_PROGRAM_FEATURES, PROGRAM_FEATURES  # noqa: F401
from costmodel.views.store import (NUM_STORE_FEATURES, STORE_FEATURES_VERSION,  # noqa: F401
                                   store_features)
from costmodel.views.warp import (BANK_BYTES, BANKS, NUM_WARP_FEATURES,  # noqa: F401
                                  SECTOR_BYTES, WARP_FEATURES, WARP_FEATURES_VERSION, WARP_SIZE)
from datagen.errors import atomic_path

DEFAULT_MEMORY_CACHE_SIZE = 4096  # graphs kept in memory, about 50 kB each
WORKLOAD_DIGEST_CHARS = 16  # workload digest prefix in a record's cache key


def save_rows(path: Path, rows: np.ndarray) -> None:
    """Write an .npy atomically (a concurrent reader sees the whole file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    with atomic_path(str(path), ".npy") as tmp, open(tmp, "wb") as out:
        np.save(out, rows, allow_pickle=False)


def record_key(workload_ir: str, trace_hash: str) -> str:
    """A record's cache key: a digest of its workload, then its trace hash (a trace hash alone
    does not name a program: two shapes of one operator can share a trace)."""
    from datagen.sampler import hash_text

    return f"{hash_text(workload_ir)[:WORKLOAD_DIGEST_CHARS]}-{trace_hash}"


class Featurizer:
    """Featurises schedules for one target, caching graphs in memory and on disk.

    Args:
        target: a `tvm.target.Target`, or anything `datagen.tvm_env.make_target` accepts
            (None: this host's CPU).
        cache_dir: if given, graphs are also kept as `cache_dir/FEATURIZER_VERSION/KIND/<key>.npz`
            (KIND: the target's kind, since one schedule lowers differently for a CPU and a GPU),
            and the rows of each cached view asked for beside them, as
            `cache_dir/VERSION/KIND/<key>.npy` (`View.folder`): store features under
            STORE_FEATURES_VERSION, warp features under WARP_FEATURES_VERSION.
        memory_cache_size: graphs kept in memory (the least recently used go first).
        **flags: each optional view's `View.flag` (`costmodel.views.optional`), True to give
            every graph that view's arrays (the attribute of the same name says whether it
            does):
            stores: its `store_x` (`store_features`).
            traces: its schedule's trace as tokens (`trace_kind`, `trace_x`:
                `costmodel.views.trace`); programs must then come as `Schedule`s or records.
            warps: its nodes' warp access features (`warp_x`, `WARP_FEATURES`).
    """

    def __init__(self, target=None, cache_dir: str | os.PathLike | None = None,
                 memory_cache_size: int = DEFAULT_MEMORY_CACHE_SIZE, **flags: bool):
        import tvm

        from datagen.tvm_env import make_target

        optional = views.optional()
        if unknown := sorted(set(flags) - {view.flag for view in optional}):
            raise TypeError(f"Featurizer.__init__() got an unexpected keyword argument "
                            f"{unknown[0]!r}")
        self.target = target if isinstance(target, tvm.target.Target) else make_target(target)
        kind = self.target.kind.name
        self.cache_dir = Path(cache_dir) / FEATURIZER_VERSION / kind if cache_dir else None
        self.views = [view for view in optional if flags.get(view.flag)]  # the ones it adds
        for view in optional:
            setattr(self, view.flag, view in self.views)
        self.view_cache_dirs = {view.name: view.folder(cache_dir, kind) for view in self.views
                                if view.cached} if cache_dir else {}
        self.memory_cache_size = memory_cache_size
        self._memory: OrderedDict[str, ProgramGraph] = OrderedDict()
        self._workloads: dict[str, object] = {}  # workload_ir digest -> IRModule

    def __repr__(self) -> str:
        flags = "".join(f"{view.flag}={getattr(self, view.flag)}, " for view in views.optional())
        return (f"Featurizer(version={FEATURIZER_VERSION!r}, target={self.target.kind.name!r}, "
                f"{flags}cache_dir={str(self.cache_dir) if self.cache_dir else None!r})")

    def _cached(self, key: str) -> ProgramGraph | None:
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        if self.cache_dir is None or not (path := self.cache_dir / f"{key}.npz").exists():
            return None
        graph = ProgramGraph.load(path)
        for view in self.views:
            if view.name in self.view_cache_dirs:  # the graph and its rows, or featurise again
                if not (rows := self.view_cache_dirs[view.name] / f"{key}.npy").exists():
                    return None
                setattr(graph, view.rows, np.load(rows, allow_pickle=False))
        self._remember(key, graph)
        return graph

    def _remember(self, key: str, graph: ProgramGraph) -> None:
        self._memory[key] = graph
        if len(self._memory) > self.memory_cache_size:
            self._memory.popitem(last=False)

    def _store(self, key: str, graph: ProgramGraph) -> ProgramGraph:
        self._remember(key, graph)
        if self.cache_dir is not None:
            self.cache_dir.mkdir(parents=True, exist_ok=True)
            graph.save(self.cache_dir / f"{key}.npz")
            for view in self.views:
                if view.name in self.view_cache_dirs:
                    save_rows(self.view_cache_dirs[view.name] / f"{key}.npy",
                              getattr(graph, view.rows))
        return graph

    def _prepare(self, mod):
        """What a graph is made from (safe to run in threads): the module lowered for features,
        and the arrays of the views asked for that are extracted from the module."""
        lowered = lower_for_features(mod, self.target)
        return lowered, {name: array for view in self.views if view.from_module
                         for name, array in view.from_module(mod, self.target).items()}

    def _finish(self, prepared) -> ProgramGraph:
        lowered, arrays = prepared
        graph = build_graph(lowered)
        for view in views.optional():
            if view not in self.views:  # the walker makes some views anyway: not asked for
                for name in view.arrays:
                    setattr(graph, name, None)
        for name, array in arrays.items():
            setattr(graph, name, array)
        return graph

    def _trace_of(self, mod_or_schedule) -> str | None:
        """The trace of a `Schedule` as JSON text if this featuriser reads traces, else None.

        Raises:
            FeaturizeError: if traces are read and the program is a bare IRModule.
        """
        if not any(view.from_trace for view in self.views):
            return None
        from datagen.sampler import trace_to_json

        if (trace := getattr(mod_or_schedule, "trace", None)) is None:
            raise FeaturizeError("this featuriser reads schedule traces: give Schedules (or "
                                 "dataset records), not IRModules")
        return trace_to_json(trace)

    def _with_trace(self, graph: ProgramGraph, trace_json: str | None) -> ProgramGraph:
        """`graph` with the arrays of the views asked for that are made from the trace (a copy;
        the graph itself if it has them or none are asked for).

        Raises:
            FeaturizeError: if the trace is not MetaSchedule's JSON.
        """
        missing = [view for view in self.views
                   if view.from_trace and getattr(graph, view.rows) is None]
        if not missing:
            return graph
        graph = copy.copy(graph)
        for view in missing:
            for name, array in view.from_trace(trace_json).items():
                setattr(graph, name, array)
        return graph

    def featurize(self, mod_or_schedule, trace_hash: str | None = None) -> ProgramGraph:
        """The graph of a scheduled IRModule or `Schedule`, cached under `trace_hash` if given.

        Raises:
            FeaturizeError: if the module cannot be lowered or walked (or, when traces are
                read, is no `Schedule`).
        """
        trace_json = self._trace_of(mod_or_schedule)
        if trace_hash and (graph := self._cached(trace_hash)) is not None:
            return self._with_trace(graph, trace_json)
        graph = self._with_trace(
            self._finish(self._prepare(getattr(mod_or_schedule, "mod", mod_or_schedule))),
            trace_json)
        return self._store(trace_hash, graph) if trace_hash else graph

    def featurize_many(self, mods_or_schedules: list, workers: int | None = None) -> list:
        """Graphs of many programs; lowering runs in `workers` threads (default: the cores).

        Raises:
            FeaturizeError: if a module cannot be lowered or walked.
        """
        return list(self.iter_featurize(mods_or_schedules, workers))

    def iter_featurize(self, mods_or_schedules: list, workers: int | None = None):
        """Yields the graphs of many programs in order, as `featurize_many` computes them.

        TVM's passes release the GIL, so lowering, the dominant cost, runs in parallel threads
        while the caller walks the graphs (and can already score the first ones).

        Raises:
            FeaturizeError: if a module cannot be lowered or walked.
        """
        from concurrent.futures import ThreadPoolExecutor

        workers = workers or len(os.sched_getaffinity(0))
        if workers < 2 or len(mods_or_schedules) < 2:
            yield from (self.featurize(m) for m in mods_or_schedules)
            return
        traces = [self._trace_of(m) for m in mods_or_schedules]
        mods = [getattr(m, "mod", m) for m in mods_or_schedules]
        with ThreadPoolExecutor(workers) as pool:
            yield from map(self._with_trace, map(self._finish, pool.map(self._prepare, mods)),
                           traces)

    def featurize_record(self, workload_ir: str, trace_json: str, trace_hash: str) -> ProgramGraph:
        """The graph of a dataset record, cached under `record_key(workload_ir, trace_hash)`.

        Args:
            workload_ir: the workload IRModule as `tvm.ir.save_json` text.
            trace_json: the record's trace (JSON text, postprocessing included).
            trace_hash: the record's trace hash.

        Raises:
            FeaturizeError: if the trace does not replay or the result cannot be lowered.
        """
        key = record_key(workload_ir, trace_hash)
        if (graph := self._cached(key)) is not None:
            return self._with_trace(graph, trace_json)
        return self._store(key, self._with_trace(
            self._finish(self._prepare_record(workload_ir, trace_json, trace_hash)), trace_json))

    def _prepare_record(self, workload_ir: str, trace_json: str, trace_hash: str):
        """`_prepare` of a record's schedule, replayed from its trace (safe to run in threads).

        Raises:
            FeaturizeError: if the trace does not replay or the result cannot be lowered.
        """
        import tvm

        from datagen.sampler import hash_text, replay

        digest = hash_text(workload_ir)
        mod = self._workloads.get(digest)
        if mod is None:  # two threads may both parse one workload: the same module either way
            mod = self._workloads[digest] = tvm.ir.load_json(workload_ir)
        try:
            sch = replay(mod, trace_json)
        except Exception as err:  # noqa: BLE001
            raise FeaturizeError(f"trace {trace_hash[:12]} does not replay: "
                                 f"{_one_line(err)}") from None
        return self._prepare(sch.mod)

    def iter_records(self, records, workers: int | None = None, window: int = 64):
        """Yields, in order, the graph of each dataset record, or the `FeaturizeError` that
        stopped it (so one bad record does not stop the rest).

        Cached graphs come straight from the cache. The others replay and lower in `workers`
        threads (default: the cores; TVM releases the GIL for both) while this thread walks
        and caches the graphs, at most `window` records ahead.

        Args:
            records: iterable of (workload_ir, trace_json, trace_hash).
        """
        from collections import deque
        from concurrent.futures import Future, ThreadPoolExecutor

        workers = workers or len(os.sched_getaffinity(0))

        def finish(key: str, trace_json: str, item) -> ProgramGraph | FeaturizeError:
            try:
                if not isinstance(item, Future):  # a cached graph
                    return self._with_trace(item, trace_json)
                return self._store(key, self._with_trace(self._finish(item.result()), trace_json))
            except FeaturizeError as err:
                return err

        with ThreadPoolExecutor(max(1, workers)) as pool:
            ahead: deque = deque()  # (key, trace, cached graph or the future of its lowering)
            for workload_ir, trace_json, trace_hash in records:
                key = record_key(workload_ir, trace_hash)
                graph = self._cached(key)
                ahead.append((key, trace_json, graph if graph is not None else pool.submit(
                    self._prepare_record, workload_ir, trace_json, trace_hash)))
                # hand out what is ready in order; wait only when `window` records are ahead
                while ahead and (len(ahead) > window or not isinstance(ahead[0][2], Future)
                                 or ahead[0][2].done()):
                    yield finish(*ahead.popleft())
            while ahead:
                yield finish(*ahead.popleft())
