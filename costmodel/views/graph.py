"""The graph view: a lowered program as a typed graph, the input every model reads.

Walking the lowered PrimFunc (`costmodel.graph_walker.build_graph`) gives one node per loop,
store, load, arithmetic op, buffer and branch, plus a root.

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
nodes: the access features summarise them.

`ProgramGraph` holds the graph, the program features (`costmodel.views.program`) and the arrays
of every optional view it was featurised with.
"""

from __future__ import annotations

import os

import numpy as np

from costmodel import views
from costmodel.views import View
from datagen.errors import atomic_path

FEATURIZER_VERSION = "tir-graph-1"

LOOP_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread_binding")  # ForKind order
OP_KINDS = ("add", "sub", "mul", "div", "mod", "min", "max", "cmp", "logic", "select", "cast",
            "exp", "log", "sqrt", "transcendental", "other_call", "other_op")
NODE_KINDS = ("root", *(f"loop_{k}" for k in LOOP_KINDS), "store", "load", "if",
              "alloc_global", "alloc_shared", "alloc_local", "alloc_other", *OP_KINDS)
VOCABULARY: dict[str, int] = {name: i for i, name in enumerate(NODE_KINDS)}

STRIDE_LOOPS = 3  # strides are taken along this many innermost enclosing loops
NODE_FEATURES = (
    "depth", "log_executions", "log_extent", "log_unroll_max_step", "unroll_explicit",
    "thread_is_block", "thread_is_virtual", "log_buffer_elems", "elem_bytes",
    *(f"log_stride_{i}" for i in range(STRIDE_LOOPS)),
    "contiguous", "log_reuse", "log_footprint", "is_reduction",
    "scope_global", "scope_shared", "scope_local", "conditional",
)
NUM_NODE_FEATURES = len(NODE_FEATURES)

EDGE_TYPES = ("nest", "nest_rev", "seq", "dataflow", "buffer")
NEST, NEST_REV, SEQ, DATAFLOW, BUFFER = range(len(EDGE_TYPES))

_ARRAYS = ("node_kind", "x", "edge_index", "edge_type", "program")  # a cached graph's .npz


class ProgramGraph:
    """One scheduled program as a typed graph, with the arrays of its other views.

    Shapes:
        node_kind: int64 [N], ids of `VOCABULARY`.
        x: float32 [N, NUM_NODE_FEATURES].
        edge_index: int64 [2, E], (source, target).
        edge_type: int64 [E], indices into `EDGE_TYPES`.
        program: float32 [NUM_PROGRAM_FEATURES] (`costmodel.views.program`).
        and each optional view's `View.arrays`, given as keywords, None unless the featuriser
        was asked for the view:
        store_x: float32 [S, NUM_STORE_FEATURES], one row per store statement
            (`costmodel.views.store`).
        trace_kind: int64 [T], trace_x: float32 [T, NUM_TRACE_FEATURES], the schedule's trace
            as tokens (`costmodel.views.trace`).
        warp_x: float32 [N, NUM_WARP_FEATURES], each node's warp access features
            (`costmodel.views.warp`).
    """

    def __init__(self, node_kind: np.ndarray, x: np.ndarray, edge_index: np.ndarray,
                 edge_type: np.ndarray, program: np.ndarray, **arrays: np.ndarray | None):
        self.node_kind, self.x, self.edge_index = node_kind, x, edge_index
        self.edge_type, self.program = edge_type, program
        for view in views.optional():
            for name in view.arrays:
                setattr(self, name, arrays.pop(name, None))
        if arrays:
            raise TypeError(f"ProgramGraph.__init__() got an unexpected keyword argument "
                            f"{next(iter(arrays))!r}")

    @property
    def num_nodes(self) -> int:
        return len(self.node_kind)

    @property
    def num_edges(self) -> int:
        return self.edge_index.shape[1]

    def __repr__(self) -> str:
        return f"ProgramGraph(nodes={self.num_nodes}, edges={self.num_edges})"

    def to_pyg(self):
        """A `torch_geometric.data.Data`; `program` is [1, P] so that batches stack it. Each
        optional view the graph has adds its arrays under their names, and a view whose rows
        are not one per node its `count` [1] as well (batches concatenate the rows and list
        each graph's count, which says which graph a row belongs to): `store_x` [S, F] and
        `store_count`; `trace_kind` [T], `trace_x` [T, F] and `trace_count`; `warp_x` [N, W],
        beside `x`."""
        import torch
        from torch_geometric.data import Data

        data = Data(x=torch.from_numpy(self.x), node_kind=torch.from_numpy(self.node_kind),
                    edge_index=torch.from_numpy(self.edge_index),
                    edge_type=torch.from_numpy(self.edge_type),
                    program=torch.from_numpy(self.program)[None], num_nodes=self.num_nodes)
        for view in views.optional():
            if getattr(self, view.rows) is None:
                continue
            for name in view.arrays:
                data[name] = torch.from_numpy(getattr(self, name))
            if view.count:
                data[view.count] = torch.tensor([len(getattr(self, view.rows))])
        return data

    def save(self, path: str | os.PathLike) -> None:
        """Write the graph's .npz atomically (a concurrent reader sees the whole file or none);
        the other views' arrays are the featuriser's to keep (`View.cached`)."""
        with atomic_path(str(path), ".npz") as tmp, open(tmp, "wb") as out:
            np.savez(out, **{name: getattr(self, name) for name in _ARRAYS})

    @classmethod
    def load(cls, path: str | os.PathLike) -> ProgramGraph:
        with np.load(path, allow_pickle=False) as data:
            return cls(**{name: data[name] for name in _ARRAYS})


GRAPH = View(
    name="graph", order=10, version=FEATURIZER_VERSION,
    sizes={"num_node_kinds": len(VOCABULARY), "num_node_features": NUM_NODE_FEATURES,
           "num_edge_types": len(EDGE_TYPES)},
    rows="x", statistics=("x_mean", "x_std"),
    layout={"vocabulary": dict(VOCABULARY), "node_features": list(NODE_FEATURES),
            "edge_types": list(EDGE_TYPES)})
