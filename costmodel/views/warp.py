"""The warp view: how one warp's memory accesses land in hardware, per node (`WARP_FEATURES`).

The lanes of a warp are the first 32 threads (threadIdx.x fastest, then y, z), every other loop
variable at 0, and each access's index is evaluated for each lane: a shared-memory access gets
its bank conflict (the most distinct 4-byte words of one of the 32 banks the warp touches: 1 is
conflict-free, 32 one word at a time), a global access the distinct 32-byte sectors the warp
touches (4 for a coalesced float32 read, 32 for a scattered one, 1 for a broadcast). Strides
alone cannot say this: a stride of 96 words puts a warp in one bank, a stride of 12 in eight.

The graph walker hands over each access it met (`costmodel.graph_walker.Access`), `warp_lanes`
evaluates its lanes and `warp_row` counts what they touch. A graph carries the rows as
`ProgramGraph.warp_x` (`Featurizer(warps=True)`), log2(1 + x), 0 on nodes that are no shared or
global access made by GPU threads; the model reads them as more node features (the
normalisation appends them to `x`).
"""

from __future__ import annotations

import math

import numpy as np

from costmodel.views import View

WARP_FEATURES_VERSION = "warp-1"
WARP_FEATURES = ("log_bank_conflict", "log_warp_sectors")
NUM_WARP_FEATURES = len(WARP_FEATURES)
WARP_SIZE, BANKS, BANK_BYTES, SECTOR_BYTES = 32, 32, 4, 32


def warp_row(scope: str, lanes: list[float]) -> tuple[float, float]:
    """`WARP_FEATURES` (before the log) of an access to "shared" or "global" memory whose lanes
    touch the byte offsets `lanes`."""
    if scope == "shared":
        banks: dict[int, set[int]] = {}
        for byte in lanes:
            word = int(byte // BANK_BYTES)
            banks.setdefault(word % BANKS, set()).add(word)
        return max(len(words) for words in banks.values()), 0.0
    return 0.0, len({int(byte // SECTOR_BYTES) for byte in lanes})


def warp_lanes(access) -> list[float] | None:
    """The byte offsets the first warp's lanes touch in an access (a
    `costmodel.graph_walker.Access`); None unless it is made by GPU threads to shared or global
    memory."""
    if access.scope not in ("shared", "global"):
        return None
    threads = {tag: (var, extent) for var, extent, tag in access.loops
               if tag.startswith("threadIdx")}  # the innermost binding of each axis
    if not threads:
        return None
    axes = [threads.get(f"threadIdx.{axis}", (None, 1)) for axis in "xyz"]
    lanes = []
    for lane in range(min(WARP_SIZE, math.prod(extent for _, extent in axes))):
        env, rest = {}, lane
        for var, extent in axes:
            if var is not None:
                env[var] = rest % extent
            rest //= extent
        lanes.append(access.offset(env) * access.elem_bytes)  # bytes
    return lanes


def warp_rows(nodes: int, accesses: list) -> dict[str, np.ndarray]:
    """`warp_x` of a walked program of `nodes` nodes from the accesses the walk met."""
    warp = np.zeros((nodes, NUM_WARP_FEATURES), np.float32)
    for access in accesses:
        if (lanes := warp_lanes(access)) is not None:
            warp[access.node] = [float(np.log2(1.0 + abs(v)))
                                 for v in warp_row(access.scope, lanes)]
    return {"warp_x": warp}


WARP = View(
    name="warp", order=50, version=WARP_FEATURES_VERSION,
    sizes={"num_warp_features": NUM_WARP_FEATURES}, rows="warp_x",
    statistics=("warp_mean", "warp_std"), arrays=("warp_x",), label="warp features",
    key="warp_features", flag="warps", from_walk=warp_rows, cached=True, units=("per node",),
    node_features=True)
