import pytest

from datagen.sampler import ScheduleSampler, replay, trace_hash
from datagen.tvm_env import make_target
from datagen.workloads import Workload

MATMUL = Workload("dense", (32, 32, 32))


@pytest.fixture(scope="module")
def sampler():
    return ScheduleSampler(MATMUL.mod, make_target(None))


def test_random_is_reproducible_and_unique(sampler):
    first = sampler.random(6, seed=7, seen=set())
    again = sampler.random(6, seed=7, seen=set())
    assert [c.trace_hash for c in first] == [c.trace_hash for c in again]
    assert len({c.trace_hash for c in first}) == len(first) == 6
    assert all(c.origin == "random" and c.trace_hash == trace_hash(c.trace_json) for c in first)


def test_seen_traces_are_not_drawn_again(sampler):
    seen: set[str] = set()
    first = sampler.random(6, seed=1, seen=seen)
    second = sampler.random(6, seed=1, seen=seen)
    assert not {c.trace_hash for c in first} & {c.trace_hash for c in second}
    assert len(seen) == len(first) + len(second)


def test_evolve_mutates_a_parent(sampler):
    seen: set[str] = set()
    parents = sampler.random(3, seed=2, seen=seen)
    children = sampler.evolve([p.trace_json for p in parents], 4, seed=3, seen=seen)
    assert children, "no mutation succeeded"
    parent_hashes = {p.trace_hash for p in parents}
    for child in children:
        assert child.origin == "evolved" and child.parent_hash in parent_hashes
        assert child.mutator.startswith("Mutate")
        assert child.trace_hash not in parent_hashes


def test_deeper_mutations_reach_past_a_parents_used_up_neighbourhood(sampler):
    """One mutation of a few parents reaches a few hundred schedules at most; once they are all
    seen, two or three mutations in a row still find new ones, each a valid, unseen schedule
    whose parent is one of them, the same for the same seed."""
    seen: set[str] = set()
    parents = [c.trace_json for c in sampler.random(2, seed=4, seen=seen)]
    near: list = []
    for seed in range(20):  # until one mutation of the parents finds nothing unseen
        if not (more := sampler.evolve(parents, 64, seed=seed, seen=seen)):
            break
        near += more
    assert near and not more, "the neighbourhood was not used up"
    far = sampler.evolve(parents, 16, seed=30, seen=set(seen), depth=3)
    assert len(far) == 16
    assert not {c.trace_hash for c in far} & seen
    assert {c.parent_hash for c in far} <= {trace_hash(p) for p in parents}
    assert [c.trace_hash for c in far] == \
        [c.trace_hash for c in sampler.evolve(parents, 16, seed=30, seen=set(seen), depth=3)]
    with pytest.raises(ValueError, match="depth must be at least 1"):
        sampler.evolve(parents, 1, seed=0, seen=set(), depth=0)


def test_stored_trace_replays_to_the_same_program(sampler):
    import tvm

    (cand,) = sampler.random(1, seed=5, seen=set())
    tvm.ir.assert_structural_equal(replay(MATMUL.mod, cand.trace_json).mod, cand.mod)
    assert "ScheduleSampler(target=llvm" in repr(sampler)


@pytest.mark.slow
def test_cuda_sampling_and_lowering_without_a_gpu():
    """CUDA design spaces, schedules and lowering to CUDA source need no device."""
    import tvm

    target = make_target("nvidia/nvidia-a100")
    gpu_sampler = ScheduleSampler(Workload("dense", (64, 64, 64)).mod, target)
    cands = gpu_sampler.random(4, seed=0, seen=set())
    assert len(cands) == 4
    lowered = 0
    for cand in cands:
        try:
            lib = tvm.compile(cand.mod, target=target)
        except Exception:  # noqa: BLE001  (a few CUDA candidates fail to lower, as in tuning)
            continue
        source = "".join(m.inspect_source() for m in lib.mod.imports)
        assert "__global__" in source and "threadIdx" in source
        lowered += 1
    assert lowered >= 1
    # most random tilings of a larger matmul break the GPU's limits: a round is still full
    big = ScheduleSampler(Workload("dense", (128, 768, 768)).mod, make_target("nvidia/nvidia-h100"))
    assert len(big.random(8, seed=0, seen=set())) == 8


def _drawn(sampler, parents=None):
    seen: set[str] = set()
    if parents is None:
        return [c.trace_hash for c in sampler.random(8, seed=11, seen=seen)], seen
    return [(c.trace_hash, c.parent_hash, c.mutator)
            for c in sampler.evolve(parents, 8, seed=12, seen=seen)], seen


@pytest.mark.parametrize("target", [None, "nvidia/nvidia-h100"])
def test_threads_draw_the_same_candidates(target):
    """In parallel threads a round is the same as drawn one by one, also where the GPU's
    limits reject most draws (a chunk drawn in vain after the last is not marked seen)."""
    mod = Workload("dense", (128, 768, 768) if target else (32, 32, 32)).mod
    one = ScheduleSampler(mod, make_target(target))
    four = ScheduleSampler(mod, make_target(target), threads=4)
    drawn, seen = _drawn(one)
    assert len(drawn) == 8 and _drawn(four) == (drawn, seen)
    parents = [c.trace_json for c in one.random(2, seed=3, seen=set())]
    children, seen = _drawn(one, parents)
    assert children and _drawn(four, parents) == (children, seen)


def test_a_space_that_runs_out_of_new_schedules_stops_the_draw_early():
    """A small design space (this pool2d has 72 random CUDA schedules) gives what it has and
    stops after MAX_SEEN_IN_A_ROW valid draws in a row that were seen before, instead of
    spending the whole attempt budget on duplicates (11 minutes for a pool2d of the suite)."""
    from datagen.sampler import MAX_SEEN_IN_A_ROW

    mod = Workload("pool2d", (4, 4, 8, 2, 2, 0, "max")).mod
    sampler = ScheduleSampler(mod, make_target("nvidia/nvidia-h100"))
    sampler.max_attempts = 64  # the budget would be 100 x 64 draws
    calls = []
    finish = sampler._finish
    sampler._finish = lambda trace, seed, *rest: calls.append(seed) or finish(trace, seed, *rest)
    seen: set[str] = set()
    drawn = sampler.random(100, seed=1, seen=seen)
    assert 0 < len(drawn) < 100 and len(seen) == len(drawn)
    assert len(calls) < 100 * 64 // 4
    again = sampler.random(100, seed=2, seen=seen)  # nothing new is left: one run of repeats
    assert len(again) <= 2 and len(calls) < 100 * 64 // 4 + 2 * MAX_SEEN_IN_A_ROW
    calls.clear()
    children = sampler.evolve([c.trace_json for c in drawn[:4]], 100, seed=3, seen=seen)
    assert len(children) < 100 and len(calls) < 100 * 64 // 4


@pytest.mark.slow
@pytest.mark.parametrize("key", ["dense/m197_n2304_k768",
                                 "conv2d/h28_w28_ci128_co128_k3_stride1_pad1",
                                 "softmax/rows1536_cols128"])
def test_gpu_draws_rejected_early_are_the_ones_the_postprocessors_reject(key):
    """For a GPU, a draw is rejected as soon as its tiled block's threads break their bounds
    (after the bounds prefix of its space, then after the whole replay): only draws that the
    postprocessors (VerifyGPUCode) reject, most of those of dense and conv2d, and the rounds
    drawn are the same as without the early check."""
    import numpy as np
    from tvm.s_tir import Schedule, Trace

    from datagen.sampler import breaks_thread_bounds
    from datagen.workloads import from_key

    mod, h100 = from_key(key).mod, make_target("nvidia/nvidia-h100")
    early, plain = ScheduleSampler(mod, h100), ScheduleSampler(mod, h100)
    assert early.checks_thread_bounds
    plain.checks_thread_bounds, plain.prefixes = False, [None] * len(plain.spaces)

    def breaks(trace, seed):
        sch = Schedule(mod, seed=seed, debug_mask=0)
        trace.apply_to_schedule(sch, remove_postproc=True)
        return breaks_thread_bounds(sch.mod)

    rng = np.random.default_rng(0)
    rejected = at_prefix = after_replay = 0
    for _ in range(40):
        i, seed = int(rng.integers(len(early.spaces))), int(rng.integers(1, 2**31 - 1))
        trace, prefix = Trace(early.spaces[i].insts, {}), early.prefixes[i]
        by_prefix = prefix is not None and breaks(prefix, seed)
        by_replay = breaks(trace, seed)
        assert by_replay or not by_prefix  # the prefix decides what the whole replay does
        if plain._finish(trace, seed) is None:
            rejected += 1
            at_prefix += by_prefix
            after_replay += by_replay
        else:
            assert not by_replay, "a draw the postprocessors accept broke its thread bounds"
    if key.startswith("softmax"):  # no tiled block: nothing to check
        assert early.prefixes == [None] * len(early.spaces) and after_replay == 0
    else:
        assert rejected > 0 and at_prefix == after_replay >= rejected / 2
    drawn = early.random(3, seed=4, seen=set())
    assert [c.trace_hash for c in drawn] == [c.trace_hash for c in plain.random(3, 4, set())]
    parents = [c.trace_json for c in drawn]
    assert [c.trace_hash for c in early.evolve(parents, 3, 5, set())] == \
        [c.trace_hash for c in plain.evolve(parents, 3, 5, set())]


def test_the_early_thread_check_stands_in_only_for_gpu_postprocessors_it_knows():
    from tvm.s_tir import meta_schedule as ms

    from datagen.sampler import _thread_bounds_checked_first

    assert not ScheduleSampler(MATMUL.mod, make_target(None)).checks_thread_bounds
    assert _thread_bounds_checked_first([ms.postproc.RewriteCooperativeFetch(),
                                         ms.postproc.VerifyGPUCode()])
    # a postprocessor it does not know may move threads before VerifyGPUCode looks
    assert not _thread_bounds_checked_first([ms.postproc.RewriteTensorize(),
                                             ms.postproc.VerifyGPUCode()])
