"""Typed graphs of scheduled tensor programs, the cost model's input.

A scheduled IRModule is lowered only as far as buffer flattening (`lower_for_features`): loops
keep their kinds and extents, thread bindings are `thread_extent` attributes and accesses are
one-dimensional, so strides can be read off the index. Walking that PrimFunc (`build_graph`)
gives one node per loop, store, load, arithmetic op, buffer and branch, plus a root.

Node kinds are `VOCABULARY` ids. Node features (`NODE_FEATURES`, float32; counts as
log2(1 + x)) describe loops (extent, unroll pragma in effect, thread level), accesses (buffer
size, element bytes, strides along the `STRIDE_LOOPS` innermost enclosing loops, contiguity,
reuse, footprint, scope) and every node's loop depth and execution count. Edges are directed
and typed by `EDGE_TYPES`:

| type | from -> to |
| --- | --- |
| nest | parent (root, loop, branch) -> child statement |
| nest_rev | child -> parent: the reverse of every nest edge |
| seq | a statement -> its next sibling |
| dataflow | operand -> op -> store within a statement; a store -> every load of its buffer |
| buffer | buffer (allocation or argument view) -> each access of it |

Only nesting comes with reverse edges; a model wanting the others both ways adds them (e.g.
`torch_geometric.transforms.ToUndirected`). Index arithmetic and branch conditions make no
nodes: the access features summarise them. Whole-program features (`PROGRAM_FEATURES`) ride
along as `ProgramGraph.program`.

Optionally (`Featurizer(warps=True)`) a graph also carries `WARP_FEATURES` per node as
`ProgramGraph.warp_x`: how one warp's memory accesses land in hardware. The lanes of a warp are
the first 32 threads (threadIdx.x fastest, then y, z), every other loop variable at 0, and each
access's index is evaluated for each lane: a shared-memory access gets its bank conflict (the
most distinct 4-byte words of one of the 32 banks the warp touches: 1 is conflict-free, 32 one
word at a time), a global access the distinct 32-byte sectors the warp touches (4 for a
coalesced float32 read, 32 for a scattered one, 1 for a broadcast). Strides alone cannot say
this: a stride of 96 words puts a warp in one bank, a stride of 12 in eight.

Optionally (`Featurizer(stores=True)`) a graph also carries MetaSchedule's PerStoreFeature of
the program as `ProgramGraph.store_x`: one row of `NUM_STORE_FEATURES` hand-made features per
store statement (loop annotations, arithmetic counts, per-buffer access patterns, reuse and
arithmetic intensity), extracted as XGBModel extracts them, the features of TenSet's MLP and
tree models. With `Featurizer(traces=True)` it carries the schedule's trace as tokens
(`costmodel.trace_features`: one per primitive, with its decisions), TLP's input, as
`ProgramGraph.trace_kind` and `ProgramGraph.trace_x`.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import os
import types
from collections import OrderedDict
from pathlib import Path

import numpy as np

from costmodel.trace_features import TraceError, trace_tokens

FEATURIZER_VERSION = "tir-graph-1"

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")  # ForKind order
OP_KINDS = ("add", "sub", "mul", "div", "mod", "min", "max", "cmp", "logic", "select", "cast",
            "exp", "log", "sqrt", "transcendental", "other_call", "other_op")
NODE_KINDS = ("root", *(f"loop_{k}" for k in LOOP_KINDS), "store", "load", "if",
              "alloc_global", "alloc_shared", "alloc_local", "alloc_other", *OP_KINDS)
VOCABULARY: dict[str, int] = {name: i for i, name in enumerate(NODE_KINDS)}
# ops counted as floating-point operations when their type is a float
FLOP_KINDS = frozenset(("add", "sub", "mul", "div", "mod", "min", "max", "exp", "log", "sqrt",
                        "transcendental"))

STRIDE_LOOPS = 3  # strides are taken along this many innermost enclosing loops
NODE_FEATURES = (
    "depth", "log_executions", "log_extent", "log_unroll_max_step", "unroll_explicit",
    "thread_is_block", "thread_is_virtual", "log_buffer_elems", "elem_bytes",
    *(f"log_stride_{i}" for i in range(STRIDE_LOOPS)),
    "contiguous", "log_reuse", "log_footprint", "is_reduction",
    "scope_global", "scope_shared", "scope_local", "conditional",
)
NUM_NODE_FEATURES = len(NODE_FEATURES)
_F = {name: i for i, name in enumerate(NODE_FEATURES)}

EDGE_TYPES = ("nest", "nest_rev", "seq", "dataflow", "buffer")
NEST, NEST_REV, SEQ, DATAFLOW, BUFFER = range(len(EDGE_TYPES))

PROGRAM_FEATURES = (
    "log_flops", "log_bytes_accessed", "log_unique_bytes", *(f"log_loops_{k}" for k in LOOP_KINDS),
    "log_max_parallel_extent", "log_max_vector_width", "log_max_unroll_step",
    "log_thread_blocks", "log_threads_per_block", "log_shared_bytes", "log_local_bytes",
    "log_stores", "log_nodes",
)
NUM_PROGRAM_FEATURES = len(PROGRAM_FEATURES)

# MetaSchedule's PerStoreFeature at XGBModel's settings (5 buffers per store, 10 samples of the
# arithmetic intensity curve): its layout, and the width of its rows
STORE_FEATURES_VERSION = "ms-per-store-feature-5-10"
NUM_STORE_FEATURES = 164

# per-node features of one warp's accesses (`Featurizer(warps=True)`), log2(1 + x), 0 on nodes
# that are no shared or global access made by GPU threads
WARP_FEATURES_VERSION = "warp-1"
WARP_FEATURES = ("log_bank_conflict", "log_warp_sectors")
NUM_WARP_FEATURES = len(WARP_FEATURES)
WARP_SIZE, BANKS, BANK_BYTES, SECTOR_BYTES = 32, 32, 4, 32

DEFAULT_MEMORY_CACHE_SIZE = 4096  # graphs kept in memory, about 50 kB each
WORKLOAD_DIGEST_CHARS = 16  # workload digest prefix in a record's cache key
_UNROLL_KEYS = ("pragma_auto_unroll_max_step", "pragma_unroll_explicit")
_THREAD_KEYS = ("thread_extent", "virtual_thread")
_ARRAYS = ("node_kind", "x", "edge_index", "edge_type", "program")
_GPU_ONLY_PASSES = frozenset(
    f"s_tir.{name}" for name in ("LowerCrossThreadReduction", "LiftThreadBinding",
                                 "ManifestSharedMemoryLocalStage", "LowerAutoCopy",
                                 "UnifyThreadBinding", "InjectPermutedLayout",
                                 "InjectSoftwarePipeline", "TransformMmaBufferLayout"))
_WIDEST = {"parallel": "parallel", "vectorized": "vector"}  # loop kind -> stat of its max extent


class FeaturizeError(ValueError):
    """A program that cannot be lowered or walked; the message is one line."""


@dataclasses.dataclass(eq=False, repr=False)
class ProgramGraph:
    """One scheduled program as a typed graph.

    Shapes:
        node_kind: int64 [N], ids of `VOCABULARY`.
        x: float32 [N, NUM_NODE_FEATURES].
        edge_index: int64 [2, E], (source, target).
        edge_type: int64 [E], indices into `EDGE_TYPES`.
        program: float32 [NUM_PROGRAM_FEATURES].
        store_x: float32 [S, NUM_STORE_FEATURES], one row per store statement (`store_features`);
            None unless the featuriser was asked for them.
        trace_kind: int64 [T], trace_x: float32 [T, NUM_TRACE_FEATURES], the schedule's trace
            as tokens (`costmodel.trace_features.trace_tokens`); None unless asked for.
        warp_x: float32 [N, NUM_WARP_FEATURES], each node's warp access features; None unless
            the featuriser was asked for them.
    """

    node_kind: np.ndarray
    x: np.ndarray
    edge_index: np.ndarray
    edge_type: np.ndarray
    program: np.ndarray
    store_x: np.ndarray | None = None
    trace_kind: np.ndarray | None = None
    trace_x: np.ndarray | None = None
    warp_x: np.ndarray | None = None

    @property
    def num_nodes(self) -> int:
        return len(self.node_kind)

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    def __repr__(self) -> str:
        return f"ProgramGraph(nodes={self.num_nodes}, edges={self.num_edges})"

    def to_pyg(self):
        """A `torch_geometric.data.Data`; `program` is [1, P] so that batches stack it. With
        `store_x`, also `store_x` [S, F] (batches concatenate the rows) and `store_count` [1]
        (batches list each graph's S, which says which graph a row belongs to); with the trace,
        `trace_kind` [T], `trace_x` [T, F] and `trace_count` [1] likewise; with `warp_x`, that
        too ([N, W], beside `x`)."""
        import torch
        from torch_geometric.data import Data

        data = Data(x=torch.from_numpy(self.x), node_kind=torch.from_numpy(self.node_kind),
                    edge_index=torch.from_numpy(self.edge_index),
                    edge_type=torch.from_numpy(self.edge_type),
                    program=torch.from_numpy(self.program)[None], num_nodes=self.num_nodes)
        if self.store_x is not None:
            data.store_x = torch.from_numpy(self.store_x)
            data.store_count = torch.tensor([len(self.store_x)])
        if self.trace_x is not None:
            data.trace_kind = torch.from_numpy(self.trace_kind)
            data.trace_x = torch.from_numpy(self.trace_x)
            data.trace_count = torch.tensor([len(self.trace_x)])
        if self.warp_x is not None:
            data.warp_x = torch.from_numpy(self.warp_x)
        return data

    def save(self, path: str | os.PathLike) -> None:
        """Write an .npz atomically: a concurrent reader sees the whole file or none."""
        tmp = f"{path}.tmp-{os.getpid()}"
        with open(tmp, "wb") as out:
            np.savez(out, **{name: getattr(self, name) for name in _ARRAYS})
        os.replace(tmp, path)

    @classmethod
    def load(cls, path: str | os.PathLike) -> ProgramGraph:
        with np.load(path, allow_pickle=False) as data:
            return cls(**{name: data[name] for name in _ARRAYS})


def _one_line(err: Exception) -> str:
    """TVM's messages end with the error itself, after the stack trace."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


# --- lowering ---------------------------------------------------------------------------------

def feature_passes(target=None) -> list:
    """TVM 0.27's default s_tir pipeline (`tvm/s_tir/pipeline.py`) up to FlattenBuffer, then
    StmtSimplify. The passes after it vectorise and unroll, which hides the loop structure.

    For a target without GPU keys the GPU-only passes and the final StmtSimplify are left out:
    they give the same graphs there (checked on every record of the committed dataset by
    `bench/featurize_check.py`) and cost about a fifth of the lowering.
    """
    from tvm import s_tir, tirx

    st = s_tir.transform
    gpu = target is None or "gpu" in target.keys
    passes = [st.CanonicalizeLoop(), st.LowerCrossThreadReduction(), st.LowerInitBlock(),
              st.PlanAndUpdateBufferAllocationLocation(), st.ConvertBlocksToOpaque(),
              st.LiftThreadBinding(), st.ManifestSharedMemoryLocalStage(),
              st.CompactBufferAllocation(), st.LowerAutoCopy(), st.UnifyThreadBinding(),
              st.LowerMatchBuffer(), st.StmtSimplify(), st.InjectPermutedLayout(),
              st.AnnotateIrregularLoop(), st.InjectSoftwarePipeline(),
              st.TransformMmaBufferLayout(), st.LowerOpaqueBlock(),
              tirx.transform.FlattenBuffer(), tirx.transform.StmtSimplify()]
    if gpu:
        return passes
    return [p for p in passes[:-1] if p.info.name not in _GPU_ONLY_PASSES]


@functools.lru_cache(maxsize=16)
def _pipeline(target):
    """BindTarget and `feature_passes` as one pass, made once per target: a lowering is then a
    single call into TVM (which releases the GIL for all of it)."""
    import tvm
    from tvm import tirx

    return tvm.ir.transform.Sequential([tirx.transform.BindTarget(target),
                                        *feature_passes(target)])


def lower_for_features(mod, target):
    """Lower a scheduled IRModule to flattened TIR that still shows its loops.

    Args:
        mod: a scheduled IRModule (e.g. `Schedule.mod`).
        target: the `tvm.target.Target` the schedule was made for.

    Raises:
        FeaturizeError: if a pass rejects the module.
    """
    try:
        with target:
            return _pipeline(target)(mod)
    except Exception as err:  # noqa: BLE001  (TVM raises assorted error types)
        raise FeaturizeError(f"cannot lower for features: {_one_line(err)}") from None


@functools.lru_cache(maxsize=1)
def _store_extractor():
    from tvm.s_tir.meta_schedule.feature_extractor import FeatureExtractor

    return FeatureExtractor.create("per-store-feature")  # XGBModel's default settings


@functools.lru_cache(maxsize=16)
def _store_context(target):
    from tvm.s_tir import meta_schedule as ms

    from datagen.tvm_env import load_tensor_intrinsics

    load_tensor_intrinsics(target.kind.name)  # a TuneContext imports them: only this kind's
    return ms.TuneContext(target=target, num_threads=1)


def store_features(mod, target) -> np.ndarray:
    """MetaSchedule's PerStoreFeature of a scheduled IRModule, as XGBModel extracts it.

    Args:
        mod: a scheduled IRModule (e.g. `Schedule.mod`), not yet lowered.
        target: the `tvm.target.Target` the schedule was made for.

    Raises:
        FeaturizeError: if the extractor rejects the module.

    Shapes:
        output: float32 [stores, NUM_STORE_FEATURES].
    """
    from tvm import s_tir
    from tvm.s_tir import meta_schedule as ms

    try:
        [rows] = _store_extractor().extract_from(_store_context(target),
                                                 [ms.MeasureCandidate(s_tir.Schedule(mod), [])])
    except Exception as err:  # noqa: BLE001
        raise FeaturizeError(f"cannot extract store features: {_one_line(err)}") from None
    return rows.numpy().astype(np.float32).reshape(-1, NUM_STORE_FEATURES)


# --- the walk ---------------------------------------------------------------------------------

def _log(x: float) -> float:
    return float(np.log2(1.0 + abs(x)))


def _const(expr, default: int = 1) -> int:
    value = getattr(expr, "value", None)
    return int(value) if isinstance(value, (int, np.integer)) else default


def _bytes(dtype) -> float:
    return dtype.bits * dtype.lanes / 8


def _scope(buf) -> str:
    scope = str(buf.scope())
    if scope.startswith("shared"):
        return "shared"
    if scope.startswith(("local", "warp", "wmma", "m16n8k8")):
        return "local"
    return "global" if scope.startswith("global") else "other"


def _scope_feature(scope: str) -> dict[str, float]:
    return {f"scope_{scope}": 1.0} if f"scope_{scope}" in _F else {}


@functools.cache
def _tables() -> types.SimpleNamespace:
    """Type dispatch tables, built on first use (importing this module does not import TVM)."""
    import tvm
    from tvm import tirx as t

    div0 = lambda f: lambda a, b: f(a, b) if b else 0  # noqa: E731
    return types.SimpleNamespace(
        t=t, load=tvm.ir.TensorLoad, call=tvm.ir.Call,
        leaves=(t.IntImm, t.FloatImm, t.Var, tvm.ir.StringImm),
        binary={t.Add: "add", t.Sub: "sub", t.Mul: "mul", t.Div: "div", t.FloorDiv: "div",
                t.Mod: "mod", t.FloorMod: "mod", t.Min: "min", t.Max: "max", t.And: "logic",
                t.Or: "logic", **dict.fromkeys((t.EQ, t.NE, t.LT, t.LE, t.GT, t.GE), "cmp")},
        calls={"if_then_else": "select", **dict.fromkeys(("exp", "exp2", "exp10"), "exp"),
               **dict.fromkeys(("log", "log2", "log10", "log1p"), "log"),
               **dict.fromkeys(("sqrt", "rsqrt"), "sqrt"),
               **dict.fromkeys(("tanh", "sigmoid", "erf", "pow", "sin", "cos", "fabs"),
                               "transcendental")},
        index={t.Add: operator.add, t.Sub: operator.sub, t.Mul: operator.mul, t.Min: min,
               t.Max: max, t.FloorDiv: div0(operator.floordiv), t.FloorMod: div0(operator.mod),
               t.Div: div0(lambda a, b: int(a / b)), t.Mod: div0(lambda a, b: int(np.fmod(a, b)))},
    )


class _GraphBuilder:
    """Walks lowered PrimFuncs. `loops` is the enclosing-loop stack: (var handle, extent, tag)."""

    def __init__(self):
        self.tab = _tables()
        self.kinds: list[int] = []
        self.rows: list[np.ndarray] = []
        self.edges: list[tuple[int, int, int]] = []
        self.loops: list[tuple[int, int, str]] = []
        self.parents: list[int] = []  # enclosing structural nodes: root, loops, branches
        self.last_child: dict[int, int] = {}
        self.unroll = (0, 0)  # (auto-unroll max step, explicit) in effect
        self.conditional = 0
        self.buffers: dict[int, int] = {}  # buffer handle -> its node
        self.accesses: dict[int, list[tuple[str, int]]] = {}  # buffer handle -> (kind, node)
        self.warp: dict[int, tuple[float, float]] = {}  # access node -> its WARP_FEATURES
        self.stats = {**{f"loops_{k}": 0 for k in LOOP_KINDS}, "parallel": 0, "vector": 0,
                      "unroll": 0, "blocks": 1, "threads": 1, "shared": 0.0, "local": 0.0,
                      "flops": 0.0, "accessed": 0.0, "unique": 0.0, "stores": 0}

    def executions(self) -> float:
        return float(math.prod(extent for _, extent, _ in self.loops))

    def add(self, kind: str, **features) -> int:
        row = np.zeros(NUM_NODE_FEATURES, np.float32)
        row[[_F["depth"], _F["log_executions"], _F["conditional"]]] = (
            len(self.loops), _log(self.executions()), self.conditional)
        for name, value in features.items():
            row[_F[name]] = value
        self.kinds.append(VOCABULARY[kind])
        self.rows.append(row)
        return len(self.kinds) - 1

    def attach(self, node: int, parent: int | None = None) -> None:
        """Make `node` the next child of `parent` (default: the innermost structural node)."""
        parent = self.parents[-1] if parent is None else parent
        self.edges += [(parent, node, NEST), (node, parent, NEST_REV)]
        if parent in self.last_child:
            self.edges.append((self.last_child[parent], node, SEQ))
        self.last_child[parent] = node

    # statements
    def walk(self, func) -> None:
        import tvm_ffi

        t = self.tab.t
        self.parents = [self.add("root")]
        tvm_ffi.structural_visit(func.body, [
            (t.For, self.on_for), (t.AttrStmt, self.on_attr), (t.BufferStore, self.on_store),
            (t.IfThenElse, self.on_if),
            ((t.AllocBuffer, t.DeclBuffer), lambda stmt, _: self.declare(stmt.buffer)),
            ((t.Bind, t.Evaluate), lambda stmt, _: None),  # nothing the features read
        ])

    def scope(self, node: int, visitor, *bodies) -> None:
        self.attach(node)
        self.parents.append(node)
        for body in bodies:
            if body is not None:
                visitor.visit(body)
        self.parents.pop()

    def loop(self, kind: str, var, extent: int, visitor, body, tag: str = "") -> None:
        stats = self.stats
        stats[f"loops_{kind}"] += 1
        if kind in _WIDEST:
            stats[_WIDEST[kind]] = max(stats[_WIDEST[kind]], extent)
        node = self.add(f"loop_{kind}", log_extent=_log(extent),
                        log_unroll_max_step=_log(self.unroll[0]), unroll_explicit=self.unroll[1],
                        thread_is_block=float(tag.startswith("blockIdx")),
                        thread_is_virtual=float(tag.startswith("vthread")))
        self.loops.append((hash(var), extent, tag))
        for name, prefix in (("blocks", "blockIdx"), ("threads", "threadIdx")):
            total = math.prod(e for _, e, g in self.loops if g.startswith(prefix))
            stats[name] = max(stats[name], int(total))
        self.scope(node, visitor, body)
        self.loops.pop()

    def set_unroll(self, key: str, value) -> tuple[int, int]:
        """Enter an unroll pragma; returns the previous setting, to restore on leaving."""
        saved, value = self.unroll, _const(value, 0)
        self.unroll = (value, saved[1]) if key == _UNROLL_KEYS[0] else (saved[0], value)
        self.stats["unroll"] = max(self.stats["unroll"], self.unroll[0])
        return saved

    def on_for(self, loop, visitor) -> None:
        saved = self.unroll
        for key in _UNROLL_KEYS:  # pragmas not yet lowered to attributes
            if loop.annotations is not None and key in loop.annotations:
                self.set_unroll(key, loop.annotations[key])
        binding = loop.thread_binding
        self.loop(LOOP_KINDS[int(loop.kind)], loop.loop_var, _const(loop.extent), visitor,
                  loop.body, str(binding.thread_tag) if binding is not None else "")
        self.unroll = saved

    def on_attr(self, attr, visitor) -> None:
        key = str(attr.attr_key)
        if key in _THREAD_KEYS:  # a launched thread: a thread-bound loop over the rest
            self.loop("thread_binding", attr.node.var, _const(attr.value), visitor, attr.body,
                      str(attr.node.thread_tag))
        elif key in _UNROLL_KEYS:
            saved = self.set_unroll(key, attr.value)
            visitor.visit(attr.body)
            self.unroll = saved
        else:
            visitor.visit(attr.body)

    def on_if(self, branch, visitor) -> None:
        self.conditional += 1
        self.scope(self.add("if"), visitor, branch.then_case, branch.else_case)
        self.conditional -= 1

    def declare(self, buf, parent: int | None = None) -> None:
        """One node per buffer, under `parent` (default: the innermost structural node)."""
        if hash(buf) in self.buffers:
            return
        scope, elems = _scope(buf), float(math.prod(_const(s) for s in buf.shape))
        nbytes = elems * _bytes(buf.dtype)
        node = self.add(f"alloc_{scope}", log_buffer_elems=_log(elems),
                        elem_bytes=_bytes(buf.dtype), **_scope_feature(scope))
        self.attach(node, parent)
        self.buffers[hash(buf)] = node
        self.stats["unique"] += nbytes
        if scope in ("shared", "local"):
            self.stats[scope] += nbytes

    def on_store(self, store, visitor) -> None:
        node = self.access("store", store.buffer, store.indices)
        self.attach(node)
        self.stats["stores"] += 1
        value = self.expr(store.value)
        if value is not None:
            self.edges.append((value, node, DATAFLOW))
        if any(k == "load" and n > node for k, n in self.accesses[hash(store.buffer)]):
            self.rows[node][_F["is_reduction"]] = 1.0  # an update: its value reads its buffer

    # expressions
    def expr(self, e) -> int | None:
        """Add the op and load nodes of a value; returns the value's node (None: a leaf)."""
        tab, cls = self.tab, type(e)
        if cls is tab.load:
            return self.access("load", e.source, e.indices)
        if isinstance(e, tab.leaves):
            return None
        if cls in tab.binary:
            kind, operands = tab.binary[cls], (e.a, e.b)
        elif cls is tab.call:
            kind = tab.calls.get(str(getattr(e.op, "name", "")).rsplit(".", 1)[-1], "other_call")
            operands = e.args[1:] if kind == "select" else e.args  # conditions make no nodes
        elif cls is tab.t.Select:
            kind, operands = "select", (e.true_value, e.false_value)
        elif cls is tab.t.Cast:
            kind, operands = "cast", (e.value,)
        elif cls is tab.t.Not:
            kind, operands = "logic", (e.a,)
        else:
            kind, operands = "other_op", ()
        dtype = getattr(e.ty, "dtype", None)
        node = self.add(kind, elem_bytes=_bytes(dtype) if dtype is not None else 0.0)
        if kind in FLOP_KINDS and dtype is not None and "float" in str(dtype):
            self.stats["flops"] += self.executions() * dtype.lanes
        for operand in operands:
            child = self.expr(operand)
            if child is not None:
                self.edges.append((child, node, DATAFLOW))
        return node

    def access(self, kind: str, buf, indices) -> int:
        """A store or load node with its stride, reuse and footprint features.

        The stride along a loop is the offset's change when that loop's variable goes from 0
        to 1 with all others at 0: exact for affine indices, an estimate under div/mod.
        """
        shape = [_const(s) for s in buf.shape]
        elems = float(math.prod(shape))
        parts = [(*self.compile_index(index), shape[i] if i < len(shape) else 1)
                 for i, index in enumerate(indices)]
        used = frozenset().union(*(names for _, names, _ in parts))

        def offset(env: dict[int, int]) -> int:  # the row-major element offset
            total = 0
            for fn, _, size in parts:
                total = total * size + fn(env)
            return total

        base = offset({})
        strides = [offset({v: 1}) - base if v in used else 0 for v, _, _ in self.loops]
        reuse = math.prod(e for (_, e, _), s in zip(self.loops, strides) if s == 0)
        footprint = min(elems, math.prod(e for (_, e, _), s in zip(self.loops, strides) if s))
        inner = strides[::-1][:STRIDE_LOOPS] + [0] * STRIDE_LOOPS
        node = self.add(kind, log_buffer_elems=_log(elems), elem_bytes=_bytes(buf.dtype),
                        contiguous=float(inner[0] == 1), log_reuse=_log(reuse),
                        log_footprint=_log(footprint),
                        **{f"log_stride_{i}": _log(inner[i]) for i in range(STRIDE_LOOPS)},
                        **_scope_feature(_scope(buf)))
        self.warp_access(node, _scope(buf), _bytes(buf.dtype), offset)
        self.declare(buf, self.parents[0])  # a buffer never declared is a function argument
        self.edges.append((self.buffers[hash(buf)], node, BUFFER))
        self.accesses.setdefault(hash(buf), []).append((kind, node))
        self.stats["accessed"] += self.executions() * _bytes(buf.dtype)
        return node

    def warp_access(self, node: int, scope: str, elem_bytes: float, offset) -> None:
        """`WARP_FEATURES` of an access (`offset`: its element offset as a function of loop
        values) made by GPU threads to shared or global memory."""
        if scope not in ("shared", "global"):
            return
        threads = {tag: (var, extent) for var, extent, tag in self.loops
                   if tag.startswith("threadIdx")}  # the innermost binding of each axis
        if not threads:
            return
        axes = [threads.get(f"threadIdx.{axis}", (None, 1)) for axis in "xyz"]
        lanes = []
        for lane in range(min(WARP_SIZE, math.prod(extent for _, extent in axes))):
            env, rest = {}, lane
            for var, extent in axes:
                if var is not None:
                    env[var] = rest % extent
                rest //= extent
            lanes.append(offset(env) * elem_bytes)  # bytes
        if scope == "shared":
            banks: dict[int, set[int]] = {}
            for byte in lanes:
                word = int(byte // BANK_BYTES)
                banks.setdefault(word % BANKS, set()).add(word)
            self.warp[node] = (max(len(words) for words in banks.values()), 0.0)
        else:
            self.warp[node] = (0.0, len({int(byte // SECTOR_BYTES) for byte in lanes}))

    def compile_index(self, e):
        """An index as a Python function of {loop var handle: value} (missing vars are 0),
        and the handles of the variables it reads: evaluating TVM nodes is slow."""
        t, cls = self.tab.t, type(e)
        if cls is t.IntImm:
            value = int(e.value)
            return (lambda env: value), frozenset()
        if cls is t.Var:
            var = hash(e)
            return (lambda env: env.get(var, 0)), frozenset((var,))
        if cls in self.tab.index:
            op, (fa, va), (fb, vb) = self.tab.index[cls], self.compile_index(e.a), \
                self.compile_index(e.b)
            return (lambda env: op(fa(env), fb(env))), va | vb
        return self.compile_index(e.value) if cls is t.Cast else ((lambda env: 0), frozenset())

    def finish(self) -> ProgramGraph:
        for nodes in self.accesses.values():  # a store feeds every load of its buffer
            loads = [n for kind, n in nodes if kind == "load"]
            self.edges += [(s, n, DATAFLOW) for kind, s in nodes if kind == "store" for n in loads]
        s = self.stats
        program = [*(s[k] for k in ("flops", "accessed", "unique",
                                    *(f"loops_{k}" for k in LOOP_KINDS), "parallel", "vector",
                                    "unroll", "blocks", "threads", "shared", "local", "stores")),
                   len(self.kinds)]  # in PROGRAM_FEATURES order
        edges = np.array(self.edges, np.int64).reshape(-1, 3)
        warp = np.zeros((len(self.kinds), NUM_WARP_FEATURES), np.float32)
        for node, values in self.warp.items():
            warp[node] = [_log(v) for v in values]
        return ProgramGraph(node_kind=np.array(self.kinds, np.int64), x=np.stack(self.rows),
                            edge_index=np.ascontiguousarray(edges[:, :2].T),
                            edge_type=edges[:, 2].copy(),
                            program=np.array([_log(v) for v in program], np.float32),
                            warp_x=warp)


def build_graph(lowered) -> ProgramGraph:
    """The graph of a module from `lower_for_features` (all its PrimFuncs, by name), with its
    warp rows (`warp_x`; a `Featurizer` keeps them only when asked to).

    Raises:
        FeaturizeError: if the module holds no PrimFunc or the walk fails.
    """
    from tvm.tirx import PrimFunc

    funcs = sorted((str(gv.name_hint), f) for gv, f in lowered.functions.items()
                   if isinstance(f, PrimFunc))
    if not funcs:
        raise FeaturizeError("the module holds no PrimFunc")
    builder = _GraphBuilder()
    try:
        for _, func in funcs:
            builder.walk(func)
    except Exception as err:  # noqa: BLE001
        raise FeaturizeError(f"cannot walk the program: {_one_line(err)}") from None
    return builder.finish()


def program_features(lowered) -> np.ndarray:
    """Whole-program features (`PROGRAM_FEATURES`) of a module from `lower_for_features`.

    FLOPs are counted on the graph (float ops times executions): TVM's `estimate_tir_flops`
    ignores thread extents once GPU loops are lowered to `thread_extent` attributes.

    Shapes:
        output: float32 [NUM_PROGRAM_FEATURES].
    """
    return build_graph(lowered).program


# --- caching front end ------------------------------------------------------------------------

def save_rows(path: Path, rows: np.ndarray) -> None:
    """Write an .npy atomically (a concurrent reader sees the whole file or none)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "wb") as out:
        np.save(out, rows, allow_pickle=False)
    os.replace(tmp, path)


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
            store features as `cache_dir/STORE_FEATURES_VERSION/KIND/<key>.npy` and warp
            features as `cache_dir/WARP_FEATURES_VERSION/KIND/<key>.npy`.
        memory_cache_size: graphs kept in memory (the least recently used go first).
        stores: also give every graph its `store_x` (`store_features`).
        traces: also give every graph its schedule's trace as tokens (`trace_kind`, `trace_x`:
            `costmodel.trace_features`); programs must then come as `Schedule`s or records.
        warps: also give every graph its nodes' warp access features (`warp_x`,
            `WARP_FEATURES`).
    """

    def __init__(self, target=None, cache_dir: str | os.PathLike | None = None,
                 memory_cache_size: int = DEFAULT_MEMORY_CACHE_SIZE, stores: bool = False,
                 traces: bool = False, warps: bool = False):
        import tvm

        from datagen.tvm_env import make_target

        self.target = target if isinstance(target, tvm.target.Target) else make_target(target)
        kind = self.target.kind.name
        self.cache_dir = Path(cache_dir) / FEATURIZER_VERSION / kind if cache_dir else None
        self.stores = stores
        self.traces = traces
        self.warps = warps
        self.store_cache_dir = Path(cache_dir) / STORE_FEATURES_VERSION / kind \
            if cache_dir and stores else None
        self.warp_cache_dir = Path(cache_dir) / WARP_FEATURES_VERSION / kind \
            if cache_dir and warps else None
        self.memory_cache_size = memory_cache_size
        self._memory: OrderedDict[str, ProgramGraph] = OrderedDict()
        self._workloads: dict[str, object] = {}  # workload_ir digest -> IRModule

    def __repr__(self) -> str:
        return (f"Featurizer(version={FEATURIZER_VERSION!r}, target={self.target.kind.name!r}, "
                f"stores={self.stores}, traces={self.traces}, warps={self.warps}, "
                f"cache_dir={str(self.cache_dir) if self.cache_dir else None!r})")

    def _cached(self, key: str) -> ProgramGraph | None:
        if key in self._memory:
            self._memory.move_to_end(key)
            return self._memory[key]
        if self.cache_dir is None or not (path := self.cache_dir / f"{key}.npz").exists():
            return None
        graph = ProgramGraph.load(path)
        if self.stores:  # both files, or featurise again
            if not (stores := self.store_cache_dir / f"{key}.npy").exists():
                return None
            graph.store_x = np.load(stores, allow_pickle=False)
        if self.warps:  # likewise
            if not (warps := self.warp_cache_dir / f"{key}.npy").exists():
                return None
            graph.warp_x = np.load(warps, allow_pickle=False)
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
            if self.stores:
                save_rows(self.store_cache_dir / f"{key}.npy", graph.store_x)
            if self.warps:
                save_rows(self.warp_cache_dir / f"{key}.npy", graph.warp_x)
        return graph

    def _prepare(self, mod):
        """What a graph is made from (safe to run in threads): the module lowered for features,
        and its store features if asked for."""
        return lower_for_features(mod, self.target), \
            store_features(mod, self.target) if self.stores else None

    def _finish(self, prepared) -> ProgramGraph:
        lowered, store_x = prepared
        graph = build_graph(lowered)
        graph.store_x = store_x
        if not self.warps:
            graph.warp_x = None
        return graph

    def _trace_of(self, mod_or_schedule) -> str | None:
        """The trace of a `Schedule` as JSON text if this featuriser reads traces, else None.

        Raises:
            FeaturizeError: if traces are read and the program is a bare IRModule.
        """
        if not self.traces:
            return None
        from datagen.sampler import trace_to_json

        if (trace := getattr(mod_or_schedule, "trace", None)) is None:
            raise FeaturizeError("this featuriser reads schedule traces: give Schedules (or "
                                 "dataset records), not IRModules")
        return trace_to_json(trace)

    def _with_trace(self, graph: ProgramGraph, trace_json: str | None) -> ProgramGraph:
        """`graph` with its trace's tokens if this featuriser reads traces (a copy).

        Raises:
            FeaturizeError: if the trace is not MetaSchedule's JSON.
        """
        if not self.traces or graph.trace_x is not None:
            return graph
        try:
            kinds, x = trace_tokens(trace_json)
        except TraceError as err:
            raise FeaturizeError(str(err)) from None
        return dataclasses.replace(graph, trace_kind=kinds, trace_x=x)

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
