import math

import numpy as np
import pytest

from costmodel.featurize import (EDGE_TYPES, FEATURIZER_VERSION, NODE_FEATURES,
                                 NUM_NODE_FEATURES, NUM_PROGRAM_FEATURES, NUM_STORE_FEATURES,
                                 PROGRAM_FEATURES, STORE_FEATURES_VERSION, VOCABULARY,
                                 WARP_FEATURES, WARP_FEATURES_VERSION, FeaturizeError,
                                 Featurizer, ProgramGraph, build_graph, lower_for_features,
                                 program_features, record_key, store_features)
from datagen.sampler import ScheduleSampler
from datagen.tvm_env import make_target
from datagen.workloads import Workload

DENSE = Workload("dense", (32, 32, 32))
CONV = Workload("conv2d", (8, 8, 16, 16, 3, 1, 1))
SCHEDULES_PER_WORKLOAD = 6
F = {name: i for i, name in enumerate(NODE_FEATURES)}


@pytest.fixture(scope="module")
def target():
    return make_target(None)


@pytest.fixture(scope="module")
def candidates(target):
    """A few random llvm schedules of each workload: (workload, Candidate) pairs."""
    return [(w, c) for w in (DENSE, CONV)
            for c in ScheduleSampler(w.mod, target).random(SCHEDULES_PER_WORKLOAD, 0, set())]


@pytest.fixture(scope="module")
def graphs(candidates, target):
    return [build_graph(lower_for_features(c.mod, target)) for _, c in candidates]


def kinds_of(graph: ProgramGraph) -> set[str]:
    names = {i: name for name, i in VOCABULARY.items()}
    return {names[int(k)] for k in graph.node_kind}


def test_constants():
    assert FEATURIZER_VERSION.startswith("tir-graph-")
    assert sorted(VOCABULARY.values()) == list(range(len(VOCABULARY)))
    assert {"root", "loop_parallel", "loop_thread_binding", "store", "load", "alloc_shared",
            "other_op"} <= set(VOCABULARY)
    assert NUM_NODE_FEATURES == len(NODE_FEATURES) and NUM_PROGRAM_FEATURES == len(PROGRAM_FEATURES)


def test_graphs_are_well_formed(graphs):
    for g in graphs:
        assert 10 <= g.num_nodes <= 500 and g.num_nodes <= g.num_edges <= 10 * g.num_nodes
        assert g.node_kind.dtype == np.int64 and g.node_kind.shape == (g.num_nodes,)
        assert g.x.dtype == np.float32 and g.x.shape == (g.num_nodes, NUM_NODE_FEATURES)
        assert g.edge_index.dtype == np.int64 and g.edge_index.shape == (2, g.num_edges)
        assert g.edge_type.dtype == np.int64 and g.edge_type.shape == (g.num_edges,)
        assert g.program.dtype == np.float32 and g.program.shape == (NUM_PROGRAM_FEATURES,)
        assert 0 <= g.edge_index.min() and g.edge_index.max() < g.num_nodes
        assert set(np.unique(g.edge_type)) <= set(range(len(EDGE_TYPES)))
        assert np.isfinite(g.x).all() and np.isfinite(g.program).all()
        assert (g.node_kind == VOCABULARY["root"]).sum() == 1
        assert {"store", "load", "mul", "add"} <= kinds_of(g)
    assert repr(graphs[0]).startswith(f"ProgramGraph(nodes={graphs[0].num_nodes}, edges=")


def test_llvm_schedules_show_parallel_and_vectorized_loops(graphs):
    seen = set().union(*(kinds_of(g) for g in graphs))
    assert {"loop_parallel", "loop_vectorized"} <= seen


def test_flops_match_tvm_estimate(candidates, graphs):
    for (workload, _), g in zip(candidates, graphs):
        flops = g.program[PROGRAM_FEATURES.index("log_flops")]
        assert flops == pytest.approx(math.log2(1 + workload.flops()), rel=1e-5)


def test_access_features_of_a_plain_matmul(target):
    """Unscheduled C[i, j] += A[i, k] * B[j, k] over loops i, j, k of 32: known strides."""
    g = build_graph(lower_for_features(DENSE.mod, target))
    rows = g.x[g.node_kind == VOCABULARY["store"]]
    update = rows[rows[:, F["is_reduction"]] == 1]
    assert len(update) == 1
    update = update[0]
    log33 = math.log2(33)
    # innermost k does not move C; j moves it by 1, i by 32; k is reused 32 times
    assert update[F["log_stride_0"]] == 0 and update[F["contiguous"]] == 0
    assert update[F["log_stride_1"]] == 1 and update[F["log_stride_2"]] == pytest.approx(log33)
    assert update[F["log_reuse"]] == pytest.approx(log33)
    assert update[F["log_executions"]] == pytest.approx(math.log2(1 + 32**3))
    assert update[F["depth"]] == 3
    loads = g.x[g.node_kind == VOCABULARY["load"]]
    # A[i*32+k] and B[j*32+k] are contiguous along k
    assert (loads[:, F["contiguous"]] == 1).sum() == 2
    loops = g.x[g.node_kind == VOCABULARY["loop_serial"]]
    assert len(loops) == 3 and np.allclose(loops[:, F["log_extent"]], log33)


def test_featurisation_is_deterministic(candidates, graphs, target):
    for (_, cand), g in zip(candidates[:3], graphs):
        again = build_graph(lower_for_features(cand.mod, target))
        for name in ("node_kind", "x", "edge_index", "edge_type", "program"):
            np.testing.assert_array_equal(getattr(g, name), getattr(again, name))


def test_parallel_featurisation_equals_serial(candidates, graphs, target):
    many = Featurizer(target).featurize_many([c for _, c in candidates], workers=2)
    assert len(many) == len(graphs)
    for g, again in zip(graphs, many):
        for name in ("node_kind", "x", "edge_index", "edge_type", "program"):
            np.testing.assert_array_equal(getattr(g, name), getattr(again, name))


def test_program_features_are_the_graph_program(candidates, graphs, target):
    lowered = lower_for_features(candidates[0][1].mod, target)
    np.testing.assert_array_equal(program_features(lowered), graphs[0].program)


def test_to_pyg_shapes(graphs):
    data = graphs[0].to_pyg()
    n = graphs[0].num_nodes
    assert data.num_nodes == n and data.x.shape == (n, NUM_NODE_FEATURES)
    assert data.node_kind.shape == (n,) and int(data.edge_index.max()) < n
    assert data.edge_index.shape[1] == data.edge_type.shape[0] == graphs[0].num_edges
    assert data.program.shape == (1, NUM_PROGRAM_FEATURES)


def test_memory_and_disk_cache(candidates, target, tmp_path):
    _, cand = candidates[0]
    featurizer = Featurizer(target, cache_dir=tmp_path)
    first = featurizer.featurize(cand.mod, cand.trace_hash)
    assert featurizer.featurize(cand.mod, cand.trace_hash) is first
    path = tmp_path / FEATURIZER_VERSION / "llvm" / f"{cand.trace_hash}.npz"
    assert path.exists()
    fresh = Featurizer(target, cache_dir=tmp_path).featurize("never lowered", cand.trace_hash)
    np.testing.assert_array_equal(fresh.x, first.x)
    np.testing.assert_array_equal(fresh.edge_index, first.edge_index)
    assert featurizer.featurize(cand.mod) is not first  # no key, no cache
    assert "tir-graph" in repr(featurizer) and "llvm" in repr(featurizer)


def test_graphs_cached_by_another_featuriser_version_are_not_used(candidates, target, tmp_path,
                                                                   monkeypatch):
    """The disk cache is a folder per featuriser version: a new version never reads graphs the
    old one wrote (it featurises again), and the old version still finds its own."""
    from costmodel import featurize

    workload, cand = candidates[1]
    ir = workload.definition()
    old = Featurizer(target, cache_dir=tmp_path).featurize_record(ir, cand.trace_json,
                                                                  cand.trace_hash)
    key = record_key(ir, cand.trace_hash)
    assert (tmp_path / FEATURIZER_VERSION / "llvm" / f"{key}.npz").exists()
    monkeypatch.setattr(featurize, "FEATURIZER_VERSION", "tir-graph-next")
    newer = Featurizer(target, cache_dir=tmp_path)
    assert newer._cached(key) is None
    with pytest.raises(FeaturizeError):  # nothing cached for it: it must lower this
        newer.featurize("never lowered", key)
    again = newer.featurize_record(ir, cand.trace_json, cand.trace_hash)
    assert again is not old and (tmp_path / "tir-graph-next" / "llvm" / f"{key}.npz").exists()
    monkeypatch.setattr(featurize, "FEATURIZER_VERSION", FEATURIZER_VERSION)
    cached = Featurizer(target, cache_dir=tmp_path).featurize("never lowered", key)
    np.testing.assert_array_equal(cached.x, old.x)


def test_featurize_record_replays_and_caches(candidates, target):
    workload, cand = candidates[1]
    featurizer = Featurizer(target)
    ir = workload.definition()
    graph = featurizer.featurize_record(ir, cand.trace_json, cand.trace_hash)
    np.testing.assert_array_equal(graph.x, featurizer.featurize(cand.mod).x)
    assert featurizer.featurize_record(ir, cand.trace_json, cand.trace_hash) is graph
    other = candidates[2][1]
    featurizer.featurize_record(ir, other.trace_json, other.trace_hash)
    assert len(featurizer._workloads) == 1
    assert record_key(ir, cand.trace_hash).endswith(cand.trace_hash)
    assert record_key(CONV.definition(), cand.trace_hash) != record_key(ir, cand.trace_hash)


def test_records_featurise_in_threads_in_order_with_errors_in_place(candidates, target,
                                                                   tmp_path):
    """`iter_records` (threads, a small window) gives what `featurize_record` gives one by one,
    in order; a record that does not replay yields its error in its place and the rest go on;
    a second pass reads the disk cache."""
    records = [(w.definition(), c.trace_json, c.trace_hash) for w, c in candidates]
    conv_trace = candidates[-1][1]
    bad = (DENSE.definition(), conv_trace.trace_json, conv_trace.trace_hash)  # conv trace
    records.insert(3, bad)
    serial = Featurizer(target)
    threaded = Featurizer(target, cache_dir=tmp_path)
    got = list(threaded.iter_records(iter(records), workers=2, window=2))
    assert len(got) == len(records)
    assert isinstance(got[3], FeaturizeError) and "does not replay" in str(got[3])
    for i, (record, graph) in enumerate(zip(records, got)):
        if i == 3:
            continue
        want = serial.featurize_record(*record)
        for name in ("node_kind", "x", "edge_index", "edge_type", "program"):
            np.testing.assert_array_equal(getattr(want, name), getattr(graph, name))
    cached = Featurizer(target, cache_dir=tmp_path)
    again = list(cached.iter_records(records, workers=1))
    assert isinstance(again[3], FeaturizeError)
    np.testing.assert_array_equal(again[-1].x, got[-1].x)
    assert len(cached._workloads) == 1  # only the record that failed was replayed


def test_clear_errors(candidates, target):
    import tvm

    with pytest.raises(FeaturizeError, match="cannot lower for features") as info:
        lower_for_features("not a module", target)
    assert "\n" not in str(info.value)
    with pytest.raises(FeaturizeError, match="no PrimFunc"):
        build_graph(tvm.IRModule({}))
    _, cand = candidates[0]
    with pytest.raises(FeaturizeError, match="does not replay"):
        Featurizer(target).featurize_record(CONV.definition(), cand.trace_json, cand.trace_hash)


@pytest.mark.slow
def test_cuda_schedules_keep_thread_bindings():
    """CUDA candidates lower without a GPU; some fail to lower, so try several."""
    target = make_target("nvidia/nvidia-a100")
    featurizer = Featurizer(target)
    sampler = ScheduleSampler(CONV.mod, target)
    graphs = []
    for cand in sampler.random(8, seed=0, seen=set()):
        try:
            graphs.append(featurizer.featurize(cand.mod, cand.trace_hash))
        except FeaturizeError:
            continue
        if len(graphs) == 2:
            break
    assert graphs, "no CUDA candidate lowered"
    for g in graphs:
        assert {"loop_thread_binding", "alloc_shared"} <= kinds_of(g)
        threads = g.x[g.node_kind == VOCABULARY["loop_thread_binding"]]
        assert threads[:, F["thread_is_block"]].any()
        assert g.program[PROGRAM_FEATURES.index("log_threads_per_block")] > 0


def test_store_features_are_what_xgbmodel_extracts(candidates, target):
    """`store_features` of a schedule is MetaSchedule's PerStoreFeature as XGBModel extracts it
    in tuning (a TuneContext of the workload, candidates with their argument info)."""
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.feature_extractor import PerStoreFeature

    workload, _ = candidates[0]
    schedules = [c for w, c in candidates if w is workload]
    context = ms.TuneContext(mod=workload.mod, target=target, num_threads=1)
    theirs = PerStoreFeature().extract_from(context, [
        ms.MeasureCandidate(c.sch, ArgInfo.from_entry_func(c.mod, remove_preproc=True))
        for c in schedules])
    for cand, want in zip(schedules, theirs):
        ours = store_features(cand.mod, target)
        assert ours.dtype == np.float32 and ours.shape == (len(want.numpy()), NUM_STORE_FEATURES)
        np.testing.assert_array_equal(ours, want.numpy().astype(np.float32))
        assert len(ours) >= 1  # a dense schedule stores at least its output


def test_graphs_carry_store_rows_only_when_asked(candidates, target, tmp_path):
    """With `stores=True` every path (one program, many in threads, records) attaches the same
    store rows, the disk cache keeps them beside the graph, and a graph cached without them is
    featurised again rather than handed out without them."""
    workload, cand = candidates[1]
    ir = workload.definition()
    plain = Featurizer(target, cache_dir=tmp_path).featurize_record(ir, cand.trace_json,
                                                                    cand.trace_hash)
    assert plain.store_x is None and not hasattr(plain.to_pyg(), "store_x")
    with_stores = Featurizer(target, cache_dir=tmp_path, stores=True)
    graph = with_stores.featurize_record(ir, cand.trace_json, cand.trace_hash)
    want = store_features(cand.mod, target)
    np.testing.assert_array_equal(graph.store_x, want)
    np.testing.assert_array_equal(graph.x, plain.x)
    key = record_key(ir, cand.trace_hash)
    assert (tmp_path / STORE_FEATURES_VERSION / "llvm" / f"{key}.npy").exists()
    cached = Featurizer(target, cache_dir=tmp_path, stores=True).featurize("never lowered", key)
    np.testing.assert_array_equal(cached.store_x, want)
    assert [len(g.store_x) for g in with_stores.featurize_many([c.mod for _, c in candidates],
                                                                workers=2)] \
        == [len(store_features(c.mod, target)) for _, c in candidates]
    data = graph.to_pyg()
    assert data.store_x.shape == (len(want), NUM_STORE_FEATURES)
    assert data.store_count.tolist() == [len(want)]


def test_graphs_carry_trace_tokens_only_when_asked(candidates, target, tmp_path):
    """With `traces=True` every path (a schedule, many in threads, a record, a record whose graph
    comes from the disk cache) attaches the tokens of the schedule's own trace; a bare IRModule
    has no trace and is refused; the cache on disk holds graphs only."""
    from costmodel.trace_features import trace_tokens

    workload, cand = candidates[1]
    ir = workload.definition()
    want_kind, want_x = trace_tokens(cand.trace_json)
    plain = Featurizer(target, cache_dir=tmp_path).featurize_record(ir, cand.trace_json,
                                                                    cand.trace_hash)
    assert plain.trace_x is None and not hasattr(plain.to_pyg(), "trace_x")
    traced = Featurizer(target, cache_dir=tmp_path, traces=True)
    from_disk = traced.featurize_record(ir, cand.trace_json, cand.trace_hash)  # cached graph
    fresh = Featurizer(target, traces=True).featurize_record(ir, cand.trace_json,
                                                            cand.trace_hash)
    from_schedule = traced.featurize(cand.sch)
    for graph in (from_disk, fresh, from_schedule):
        np.testing.assert_array_equal(graph.trace_kind, want_kind)
        np.testing.assert_array_equal(graph.trace_x, want_x)
        np.testing.assert_array_equal(graph.x, plain.x)
    many = traced.featurize_many([c.sch for _, c in candidates], workers=2)
    for graph, (_, c) in zip(many, candidates):
        np.testing.assert_array_equal(graph.trace_x, trace_tokens(c.trace_json)[1])
    [from_records] = traced.iter_records([(ir, cand.trace_json, cand.trace_hash)])
    np.testing.assert_array_equal(from_records.trace_kind, want_kind)
    data = from_schedule.to_pyg()
    assert data.trace_x.shape == want_x.shape and data.trace_count.tolist() == [len(want_x)]
    with pytest.raises(FeaturizeError, match="reads schedule traces: give Schedules"):
        traced.featurize(cand.mod)
    [error] = Featurizer(target, traces=True).iter_records([(ir, "{not json", "f" * 40)])
    assert isinstance(error, FeaturizeError)  # one bad record is reported, not raised


def strided_kernel(stride: int):
    """32 GPU threads: thread t copies A[t * stride] into shared S[t * stride], then writes
    B[t] = S[t * stride] + A[0]. Written as TIR by hand, so the expected warp features are
    known: TVMScript's well-formedness check rejects blocks under a thread binding written
    this way, which the lowering accepts."""
    import tvm
    from tvm.script import tirx as T

    @T.prim_func(check_well_formed=False)
    def main(A: T.Buffer((1024,), "float32"), B: T.Buffer((32,), "float32")):
        for tx in T.thread_binding(32, thread="threadIdx.x"):
            with T.sblock("copy"):
                v = T.axis.spatial(32, tx)
                S = T.alloc_buffer((1024,), "float32", scope="shared")
                S[v * stride] = A[v * stride]
                B[v] = S[v * stride] + A[0]

    return tvm.IRModule({"main": main})


@pytest.mark.parametrize("stride, ways, sectors", [
    (1, 1, 4),     # consecutive words: every bank once; 128 bytes are 4 sectors
    (2, 2, 8),     # every other word: two lanes per bank
    (31, 1, 32),   # an odd stride meets every bank once, yet each lane its own sector
    (32, 32, 32),  # one bank for the whole warp: 32 words one at a time
])
def test_warp_features_of_known_access_patterns(stride, ways, sectors):
    g = build_graph(lower_for_features(strided_kernel(stride), make_target("nvidia/nvidia-a100")))
    names = {i: name for name, i in VOCABULARY.items()}
    seen = sorted((names[int(k)], *(round(2 ** v - 1) for v in w))
                  for k, w in zip(g.node_kind, g.warp_x) if w.any())
    assert WARP_FEATURES == ("log_bank_conflict", "log_warp_sectors")
    assert seen == sorted([("load", 0, sectors), ("store", ways, 0),  # S[t*s] = A[t*s]
                           ("load", ways, 0), ("load", 0, 1),  # S[t*s], A[0]: a broadcast
                           ("store", 0, 4)])  # B[t]


def test_graphs_carry_warp_rows_only_when_asked(candidates, target, tmp_path):
    """With `warps=True` a graph carries one row of warp features per node (all 0 on a CPU,
    which has no threads), the disk cache keeps them beside the graph, and a graph cached
    without them is featurised again rather than handed out without them."""
    workload, cand = candidates[1]
    ir = workload.definition()
    plain = Featurizer(target, cache_dir=tmp_path).featurize_record(ir, cand.trace_json,
                                                                    cand.trace_hash)
    assert plain.warp_x is None and not hasattr(plain.to_pyg(), "warp_x")
    with_warps = Featurizer(target, cache_dir=tmp_path, warps=True)
    graph = with_warps.featurize_record(ir, cand.trace_json, cand.trace_hash)
    assert graph.warp_x.shape == (graph.num_nodes, len(WARP_FEATURES)) and not graph.warp_x.any()
    np.testing.assert_array_equal(graph.x, plain.x)
    key = record_key(ir, cand.trace_hash)
    assert (tmp_path / WARP_FEATURES_VERSION / "llvm" / f"{key}.npy").exists()
    cached = Featurizer(target, cache_dir=tmp_path, warps=True).featurize("never lowered", key)
    assert cached.warp_x.shape == graph.warp_x.shape
    assert graph.to_pyg().warp_x.shape == graph.warp_x.shape
    gpu = Featurizer(make_target("nvidia/nvidia-a100"), warps=True)
    lowered = []
    for c in ScheduleSampler(DENSE.mod, gpu.target).random(8, seed=0, seen=set()):
        try:
            lowered.append(gpu.featurize(c.mod))
        except FeaturizeError:
            continue
    assert lowered and all(g.warp_x[:, 1].any() for g in lowered)  # every kernel reads memory
