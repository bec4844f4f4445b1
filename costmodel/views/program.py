"""The program view: whole-program features (`PROGRAM_FEATURES`), beside the graph.

FLOPs, bytes accessed, loop counts by kind, the widest parallel and vector loops, unrolling,
thread blocks and threads per block, shared and local memory, stores and nodes, as log2(1 + x).
The graph walker counts them while it walks (`costmodel.graph_walker.program_features`): FLOPs
are float ops times executions on the graph, since TVM's `estimate_tir_flops` ignores thread
extents once GPU loops are lowered to `thread_extent` attributes. A graph carries them as
`ProgramGraph.program`; a model reads them when its `num_program_features` is not 0.
"""

from __future__ import annotations

from costmodel.views import View
from costmodel.views.graph import FEATURIZER_VERSION, LOOP_KINDS

PROGRAM_FEATURES = (
    "log_flops", "log_bytes_accessed", "log_unique_bytes", *(f"log_loops_{k}" for k in LOOP_KINDS),
    "log_max_parallel_extent", "log_max_vector_width", "log_max_unroll_step",
    "log_thread_blocks", "log_threads_per_block", "log_shared_bytes", "log_local_bytes",
    "log_stores", "log_nodes",
)
NUM_PROGRAM_FEATURES = len(PROGRAM_FEATURES)

# versioned with the graph: one walk makes both
PROGRAM = View(name="program", order=20, version=FEATURIZER_VERSION,
               sizes={"num_program_features": NUM_PROGRAM_FEATURES},
               rows="program", statistics=("program_mean", "program_std"),
               layout={"program_features": list(PROGRAM_FEATURES)})
