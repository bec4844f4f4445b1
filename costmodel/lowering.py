"""Lowering a scheduled IRModule for features, and the one error type featurisation raises.

A scheduled IRModule is lowered only as far as buffer flattening (`lower_for_features`): loops
keep their kinds and extents, thread bindings are `thread_extent` attributes and accesses are
one-dimensional, so strides can be read off the index. The graph walker
(`costmodel.graph_walker`) reads what this leaves.
"""

from __future__ import annotations

import functools

_GPU_ONLY_PASSES = frozenset(
    f"s_tir.{name}" for name in ("LowerCrossThreadReduction", "LiftThreadBinding",
                                 "ManifestSharedMemoryLocalStage", "LowerAutoCopy",
                                 "UnifyThreadBinding", "InjectPermutedLayout",
                                 "InjectSoftwarePipeline", "TransformMmaBufferLayout"))


class FeaturizeError(ValueError):
    """A program that cannot be lowered or walked; the message is one line."""


def _one_line(err: Exception) -> str:
    """TVM's messages end with the error itself, after the stack trace."""
    lines = [line.strip() for line in str(err).splitlines() if line.strip()]
    return lines[-1] if lines else type(err).__name__


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
