"""The graph walker: one walk of a lowered module makes several views at once.

`build_graph` walks the PrimFuncs of a module from `costmodel.lowering.lower_for_features` and
gives its `ProgramGraph`: the typed graph (`costmodel.views.graph`: node kinds, node features,
typed edges), the whole-program features it counts on the way (`costmodel.views.program`) and
the arrays of every view made from what the walk met (`View.from_walk`, e.g. each node's warp
access features, `costmodel.views.warp`), which a `Featurizer` keeps only when asked for them.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import operator
import types
from collections.abc import Callable

import numpy as np

from costmodel import views
from costmodel.lowering import FeaturizeError, _one_line
from costmodel.views.graph import (BUFFER, DATAFLOW, LOOP_KINDS, NEST, NEST_REV, NODE_FEATURES,
                                   NUM_NODE_FEATURES, SEQ, STRIDE_LOOPS, VOCABULARY,
                                   ProgramGraph)

# ops counted as floating-point operations when their type is a float
FLOP_KINDS = frozenset(("add", "sub", "mul", "div", "mod", "min", "max", "exp", "log", "sqrt",
                        "transcendental"))
_F = {name: i for i, name in enumerate(NODE_FEATURES)}
_UNROLL_KEYS = ("pragma_auto_unroll_max_step", "pragma_unroll_explicit")
_THREAD_KEYS = ("thread_extent", "virtual_thread")
_WIDEST = {"parallel": "parallel", "vectorized": "vector"}  # loop kind -> stat of its max extent


def _log(x: float) -> float:
    return float(np.log2(1.0 + abs(x)))


@dataclasses.dataclass(frozen=True)
class Access:
    """One store or load the walk met, as the views made from the walk read it (`from_walk`).

    Args:
        node: its node.
        scope: its buffer's memory: "global", "shared", "local" or "other".
        elem_bytes: bytes per element of its buffer.
        offset: its row-major element offset as a function of {loop var handle: value}
            (variables missing are 0).
        loops: the loops around it, outermost first: (var handle, extent, thread tag or "").
    """

    node: int
    scope: str
    elem_bytes: float
    offset: Callable[[dict[int, int]], int]
    loops: tuple[tuple[int, int, str], ...]


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
        self.met: list[Access] = []  # every access, for the views made from the walk
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
        self.met.append(Access(node, _scope(buf), _bytes(buf.dtype), offset, tuple(self.loops)))
        self.declare(buf, self.parents[0])  # a buffer never declared is a function argument
        self.edges.append((self.buffers[hash(buf)], node, BUFFER))
        self.accesses.setdefault(hash(buf), []).append((kind, node))
        self.stats["accessed"] += self.executions() * _bytes(buf.dtype)
        return node

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

    def finish(self, **arrays: np.ndarray) -> ProgramGraph:
        """The walked graph, with the other views' `arrays`."""
        for nodes in self.accesses.values():  # a store feeds every load of its buffer
            loads = [n for kind, n in nodes if kind == "load"]
            self.edges += [(s, n, DATAFLOW) for kind, s in nodes if kind == "store" for n in loads]
        s = self.stats
        program = [*(s[k] for k in ("flops", "accessed", "unique",
                                    *(f"loops_{k}" for k in LOOP_KINDS), "parallel", "vector",
                                    "unroll", "blocks", "threads", "shared", "local", "stores")),
                   len(self.kinds)]  # in PROGRAM_FEATURES order
        edges = np.array(self.edges, np.int64).reshape(-1, 3)
        return ProgramGraph(node_kind=np.array(self.kinds, np.int64), x=np.stack(self.rows),
                            edge_index=np.ascontiguousarray(edges[:, :2].T),
                            edge_type=edges[:, 2].copy(),
                            program=np.array([_log(v) for v in program], np.float32), **arrays)


def build_graph(lowered) -> ProgramGraph:
    """The graph of a module from `lower_for_features` (all its PrimFuncs, by name), with the
    arrays of every view made from the walk (`View.from_walk`: `warp_x`; a `Featurizer` keeps
    them only when asked to).

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
        arrays = {name: array for view in views.optional() if view.from_walk
                  for name, array in view.from_walk(len(builder.kinds), builder.met).items()}
    except Exception as err:  # noqa: BLE001
        raise FeaturizeError(f"cannot walk the program: {_one_line(err)}") from None
    return builder.finish(**arrays)


def program_features(lowered) -> np.ndarray:
    """Whole-program features (`PROGRAM_FEATURES`) of a module from `lower_for_features`.

    FLOPs are counted on the graph (float ops times executions): TVM's `estimate_tir_flops`
    ignores thread extents once GPU loops are lowered to `thread_extent` attributes.

    Shapes:
        output: float32 [NUM_PROGRAM_FEATURES].
    """
    return build_graph(lowered).program
