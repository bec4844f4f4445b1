import math

import numpy as np
import pytest
import torch

from costmodel.losses import (RANK_LOSSES, cost_model_loss, delta_ndcg, hinge_pair_loss,
                               pairwise_rank_loss, rank_loss)
from costmodel.model import READOUTS, GraphSAGECostModel
from datagen.errors import UserError


def _tiny_batch():
    # two graphs: a 4-node chain and a 3-node star, two edge types
    node_kind = torch.tensor([0, 1, 2, 1, 0, 2, 2])
    x = torch.arange(7 * 3, dtype=torch.float32).reshape(7, 3) / 10
    edge_index = torch.tensor([[0, 1, 2, 4, 4], [1, 2, 3, 5, 6]])
    edge_type = torch.tensor([0, 0, 1, 0, 1])
    batch = torch.tensor([0, 0, 0, 0, 1, 1, 1])
    return node_kind, x, edge_index, edge_type, batch


def test_shapes_repr_and_determinism():
    torch.manual_seed(0)
    model = GraphSAGECostModel(num_node_kinds=3, num_node_features=3, num_edge_types=2,
                               num_program_features=2, hidden=16).eval()
    program = torch.ones(2, 2)
    out = model(*_tiny_batch(), program)
    assert out.shape == (2,)
    assert torch.equal(out, model(*_tiny_batch(), program))
    assert model.embed(*_tiny_batch(), program).shape == (2, 3 * 16)
    assert "SAGEConv(16, 16" in repr(model)
    out.sum().backward()  # gradients flow to every parameter
    assert all(p.grad is not None for p in model.parameters())


@pytest.mark.parametrize("readout", READOUTS)
def test_graphs_do_not_leak_into_each_other(readout):
    torch.manual_seed(0)
    model = GraphSAGECostModel(3, 3, 2, hidden=8, readout=readout).eval()
    kinds, x, ei, et, batch = _tiny_batch()
    before = model(kinds, x, ei, et, batch)
    x2 = x.clone()
    x2[4:] += 5.0  # change only graph 1
    after = model(kinds, x2, ei, et, batch)
    assert after[0] == before[0] and after[1] != before[1]


@pytest.mark.parametrize("readout", READOUTS[1:])
def test_a_third_pooling_widens_the_readout_and_is_trained(readout):
    torch.manual_seed(0)
    model = GraphSAGECostModel(3, 3, 2, num_program_features=2, hidden=16, readout=readout)
    assert model.architecture["readout"] == readout
    assert "readout" not in GraphSAGECostModel(3, 3, 2).architecture  # the default: as before
    program = torch.ones(2, 2)
    assert model.embed(*_tiny_batch(), program).shape == (2, 4 * 16)
    model(*_tiny_batch(), program).sum().backward()
    assert all(p.grad is not None for p in model.pool.parameters())


def test_the_logsum_readout_grows_with_the_program():
    """Latency adds up over statements: a graph with more of the same nodes pools larger."""
    torch.manual_seed(0)
    model = GraphSAGECostModel(1, 1, 1, hidden=8, readout="mean_max_logsum").eval()
    kinds, x = torch.zeros(6, dtype=torch.long), torch.ones(6, 1)
    edges, types = torch.zeros(2, 0, dtype=torch.long), torch.zeros(0, dtype=torch.long)
    pooled = model.embed(kinds, x, edges, types, torch.tensor([0, 0, 1, 1, 1, 1]))[:, 16:]
    assert torch.all(pooled[1] > pooled[0])  # 4 identical nodes against 2


def test_store_rows_are_a_second_view_of_each_program():
    """Store rows (S, F) of the batch's programs (row counts per graph): each program pools only
    its own rows, in any order, a program without stores works, and the branch is trained."""
    torch.manual_seed(0)
    model = GraphSAGECostModel(3, 3, 2, num_program_features=2, hidden=16,
                               num_store_features=4).eval()
    assert model.architecture["num_store_features"] == 4
    assert "num_store_features" not in GraphSAGECostModel(3, 3, 2).architecture  # as before
    program, rows, count = torch.ones(2, 2), torch.randn(3, 4), torch.tensor([3, 0])
    out = model(*_tiny_batch(), program, rows, count)
    assert out.shape == (2,) and model.embed(*_tiny_batch(), program, rows,
                                             count).shape == (2, 4 * 16)
    torch.testing.assert_close(model(*_tiny_batch(), program, rows[[2, 0, 1]], count), out)
    changed = model(*_tiny_batch(), program, rows + 1.0, count)
    assert changed[0] != out[0] and changed[1] == out[1]  # graph 1 has no rows to change
    shifted = model(*_tiny_batch(), program, rows, torch.tensor([1, 2]))
    assert shifted[1] != out[1]  # rows now belong to graph 1 as well
    model.train()
    model(*_tiny_batch(), program, rows, count).sum().backward()
    assert all(p.grad is not None for p in model.store_mlp.parameters())


def test_trace_tokens_are_a_third_view_of_each_program():
    """Trace tokens (T, F) with token counts per graph: each program attends to and pools only
    its own tokens, padding a shorter trace changes nothing, and the branch is trained."""
    torch.manual_seed(0)
    model = GraphSAGECostModel(3, 3, 2, hidden=16, num_trace_features=5, num_trace_kinds=7,
                               trace_layers=2).eval()
    assert model.architecture["num_trace_features"] == 5
    assert model.architecture["num_trace_kinds"] == 7 and model.architecture["trace_layers"] == 2
    assert "num_trace_features" not in GraphSAGECostModel(3, 3, 2).architecture  # as before
    kind, x, count = torch.tensor([0, 3, 4, 0, 6]), torch.randn(5, 5), torch.tensor([3, 2])
    tokens = (None, None, None, kind, x, count)
    out = model(*_tiny_batch(), *tokens)
    assert out.shape == (2,) and model.embed(*_tiny_batch(), *tokens).shape == (2, 4 * 16)
    changed_x = x.clone()
    changed_x[4] += 1.0  # a token of graph 1
    changed = model(*_tiny_batch(), None, None, None, kind, changed_x, count)
    assert changed[0] == out[0] and changed[1] != out[1]
    # graph 1 alone in a batch (no padding to graph 0's length) scores as in the batch
    alone = model.trace(kind[3:], x[3:], count[1:])
    torch.testing.assert_close(alone, model.trace(kind, x, count)[1:])
    swapped = model(*_tiny_batch(), None, None, None, kind[[1, 0, 2, 3, 4]],
                    x[[1, 0, 2, 3, 4]], count)
    assert swapped[0] != out[0]  # positions matter: the order of primitives is read
    model.train()
    model(*_tiny_batch(), *tokens).sum().backward()
    assert all(p.grad is not None for p in model.trace.parameters())


def test_each_graph_takes_its_own_head():
    """With two heads the graphs share every layer and each is read by the head it names; no
    head named is head 0, which a one-head model's weights fill as they always did."""
    torch.manual_seed(0)
    model = GraphSAGECostModel(3, 3, 2, hidden=8, num_heads=2).eval()
    assert model.architecture["num_heads"] == 2
    assert "num_heads" not in GraphSAGECostModel(3, 3, 2).architecture  # one head: as before
    emb = model.embed(*_tiny_batch())
    own, theirs = model.head(emb).squeeze(-1), model.extra_heads[0](emb).squeeze(-1)
    assert not torch.allclose(own, theirs)
    assert torch.equal(model(*_tiny_batch()), own)
    assert torch.equal(model(*_tiny_batch(), head=torch.tensor([0, 0])), own)
    mixed = model(*_tiny_batch(), head=torch.tensor([1, 0]))
    assert mixed[0] == theirs[0] and mixed[1] == own[1]
    # a graph of the other head trains that head and the shared layers, not head 0
    model(*_tiny_batch(), head=torch.tensor([1, 1])).sum().backward()
    assert all(p.grad is None or not p.grad.any() for p in model.head.parameters())
    assert all(p.grad is not None and p.grad.any() for p in model.extra_heads.parameters())
    assert model.kind_embedding.weight.grad.any()
    one = GraphSAGECostModel(3, 3, 2, hidden=8)
    model.load_state_dict(one.state_dict(), strict=False)  # head 0 is a one-head model's head
    assert torch.equal(model(*_tiny_batch()), one.eval()(*_tiny_batch()))
    with pytest.raises(ValueError, match="num_heads must be at least 1, not 0"):
        GraphSAGECostModel(3, 3, 2, num_heads=0)


def test_an_unknown_readout_is_refused():
    with pytest.raises(ValueError, match="unknown readout 'sum'"):
        GraphSAGECostModel(3, 3, 2, readout="sum")


def test_rank_loss_on_a_hand_made_pair():
    target = torch.tensor([1.0, 2.0])  # candidate 1 is slower
    group = torch.tensor([0, 0])
    right = torch.tensor([0.0, 1.0])
    wrong = torch.tensor([1.0, 0.0])
    assert pairwise_rank_loss(right, target, group).item() == pytest.approx(math.log1p(math.exp(-1)))
    assert pairwise_rank_loss(wrong, target, group).item() == pytest.approx(math.log1p(math.exp(1)))
    assert pairwise_rank_loss(right, target, group, hinge_pair_loss).item() == 0.0
    assert pairwise_rank_loss(wrong, target, group, hinge_pair_loss).item() == pytest.approx(1.1)
    assert rank_loss(wrong, target, group, "hinge").item() == pytest.approx(1.1)


def test_rank_loss_ignores_pairs_across_workloads():
    pred = torch.tensor([5.0, 0.0], requires_grad=True)
    loss = pairwise_rank_loss(pred, torch.tensor([1.0, 2.0]), torch.tensor([0, 1]))
    assert loss.item() == 0.0
    loss.backward()


def test_combined_loss_weights():
    pred, target, group = torch.tensor([0.0, 1.0]), torch.tensor([0.0, 3.0]), torch.tensor([0, 0])
    total, parts = cost_model_loss(pred, target, group, mse_weight=2.0, rank_weight=0.5)
    assert parts["mse"].item() == pytest.approx(2.0)
    assert total.item() == pytest.approx(2 * 2.0 + 0.5 * math.log1p(math.exp(-1)))
    with pytest.raises(UserError, match="unknown rank loss 'cosine'; choose one of logistic, "
                                        "hinge, listmle, lambdarank, regret"):
        rank_loss(pred, target, group, "cosine")
    total, parts = cost_model_loss(pred, target, group, rank_kind="listmle")
    assert parts["rank"].item() == pytest.approx(math.log1p(math.exp(-1)))


def test_listmle_by_hand():
    group = torch.tensor([0, 0])
    # on a pair ListMLE is RankNet's logistic loss
    for pred in ([0.0, 1.0], [1.0, 0.0], [0.3, -2.0]):
        pred = torch.tensor(pred)
        assert rank_loss(pred, torch.tensor([1.0, 2.0]), group, "listmle").item() == \
            pytest.approx(rank_loss(pred, torch.tensor([1.0, 2.0]), group, "logistic").item())
    # three programs, true order 0, 1, 2 (fastest first); Plackett-Luce scores are -pred
    pred = torch.tensor([0.0, 2.0, 1.0])
    s = [0.0, -2.0, -1.0]
    nll = (math.log(sum(math.exp(v) for v in s)) - s[0]) \
        + (math.log(math.exp(s[1]) + math.exp(s[2])) - s[1])
    assert rank_loss(pred, torch.tensor([1.0, 2.0, 3.0]), torch.zeros(3, dtype=torch.long),
                     "listmle").item() == pytest.approx(nll / 2)


def test_lambdarank_by_hand():
    target, group = torch.tensor([1.0, 2.0, 3.0]), torch.zeros(3, dtype=torch.long)
    pred = torch.tensor([0.0, 2.0, 1.0])  # predicted order 0, 2, 1
    # relevance (= gain) by true rank: 2, 1, 0; discounts by predicted position: 1, 1/log2(4),
    # 1/log2(3); ideal DCG: 2 + 1/log2(3)
    disc = [1.0, 0.5, 1 / math.log2(3)]
    ideal = 2 + 1 / math.log2(3)
    want = {(0, 1): 1 * abs(disc[0] - disc[1]) / ideal, (0, 2): 2 * abs(disc[0] - disc[2]) / ideal,
            (1, 2): 1 * abs(disc[1] - disc[2]) / ideal}
    got = delta_ndcg(pred, target, group)
    for (i, j), w in want.items():
        assert got[i, j].item() == pytest.approx(w) and got[j, i].item() == pytest.approx(w)
    logistic = {(i, j): math.log1p(math.exp(-(pred[j] - pred[i]).item())) for i, j in want}
    expected = sum(want[p] * logistic[p] for p in want) / sum(want.values())
    assert rank_loss(pred, target, group, "lambdarank").item() == pytest.approx(expected)
    # pairs of different workloads get no weight
    assert delta_ndcg(pred, target, torch.tensor([0, 1, 1]))[0].abs().sum() == 0


def test_lambdarank_weighs_a_wrong_top_more_than_a_wrong_bottom():
    """The same misordered pair costs RankNet the same anywhere; LambdaRank cares at the top."""
    target, group = torch.tensor([1.0, 2.0, 3.0, 4.0]), torch.zeros(4, dtype=torch.long)
    top_swapped = torch.tensor([1.0, 0.0, 2.0, 3.0])
    bottom_swapped = torch.tensor([0.0, 1.0, 3.0, 2.0])
    assert rank_loss(top_swapped, target, group, "logistic").item() == \
        pytest.approx(rank_loss(bottom_swapped, target, group, "logistic").item())
    assert rank_loss(top_swapped, target, group, "lambdarank") > \
        rank_loss(bottom_swapped, target, group, "lambdarank") * 1.2


def test_regret_by_hand():
    """Pairs weigh their gap in normalised throughput: exp(-(target - lowest) * scale)."""
    target, group = torch.tensor([0.0, 1.0, 1.5]), torch.zeros(3, dtype=torch.long)
    pred = torch.tensor([0.0, 2.0, 1.0])
    scale = 2.0
    thr = [math.exp(-t * scale) for t in (0.0, 1.0, 1.5)]
    pairs = [(0, 1), (0, 2), (1, 2)]
    w = {(i, j): thr[i] - thr[j] for i, j in pairs}
    logistic = {(i, j): math.log1p(math.exp(-(pred[j] - pred[i]).item())) for i, j in pairs}
    expected = sum(w[p] * logistic[p] for p in pairs) / sum(w.values())
    assert rank_loss(pred, target, group, "regret", scale).item() == pytest.approx(expected)
    # a workload's lowest target is its own: shifting one workload's targets changes nothing
    two = torch.cat([target, target + 3.0]), torch.tensor([0, 0, 0, 1, 1, 1])
    assert rank_loss(torch.cat([pred, pred]), *two, "regret", scale).item() == \
        pytest.approx(expected)
    # the ordinal losses do not read the scale
    assert rank_loss(pred, target, group, "logistic", scale) == \
        rank_loss(pred, target, group, "logistic")


def test_regret_weighs_a_wrong_best_more_than_a_wrong_slow_pair():
    """The pair with the workload's best costs a tuner the most when misordered; a pair of
    two slow programs almost nothing (RankNet weighs both the same)."""
    target, group = torch.tensor([0.0, 1.0, 2.0, 3.0]), torch.zeros(4, dtype=torch.long)
    best_swapped = torch.tensor([1.0, 0.0, 2.0, 3.0])
    slow_swapped = torch.tensor([0.0, 1.0, 3.0, 2.0])
    assert rank_loss(best_swapped, target, group, "logistic").item() == \
        pytest.approx(rank_loss(slow_swapped, target, group, "logistic").item())
    assert rank_loss(best_swapped, target, group, "regret", 1.0) > \
        rank_loss(slow_swapped, target, group, "regret", 1.0) * 2


@pytest.mark.parametrize("kind", ["logistic", "hinge", "listmle", "lambdarank", "regret"])
def test_every_rank_loss_ranks_within_workloads_only(kind):
    assert kind in RANK_LOSSES.names()
    target = torch.tensor([1.0, 2.0, 3.0, 5.0, 4.0, 6.0])
    group = torch.tensor([0, 0, 0, 1, 1, 1])
    right = torch.tensor([-1.0, 0.0, 1.0, -1.0, -2.0, 0.0])  # each workload in true order
    wrong = -right
    assert rank_loss(right, target, group, kind) < rank_loss(wrong, target, group, kind)
    # shifting one workload's predictions changes nothing: workloads are never compared
    shifted = right + torch.tensor([0.0, 0.0, 0.0, 7.0, 7.0, 7.0])
    assert rank_loss(shifted, target, group, kind).item() == \
        pytest.approx(rank_loss(right, target, group, kind).item())
    pred = wrong.clone().requires_grad_(True)
    rank_loss(pred, target, group, kind).backward()
    assert torch.isfinite(pred.grad).all() and pred.grad.abs().sum() > 0
    # no two records of one workload: no ranking, a zero loss that still back-propagates
    lone = torch.tensor([5.0, 0.0], requires_grad=True)
    loss = rank_loss(lone, torch.tensor([1.0, 2.0]), torch.tensor([0, 1]), kind)
    assert loss.item() == 0.0
    loss.backward()


@pytest.mark.parametrize("per_flop", [False, True])
def test_normalization_round_trips_latency(per_flop):
    from costmodel.featurize import NUM_NODE_FEATURES, NUM_PROGRAM_FEATURES, ProgramGraph
    from costmodel.normalization import Normalization

    def graph(log2_flops):
        program = np.zeros(NUM_PROGRAM_FEATURES, np.float32)
        program[0] = log2_flops
        return ProgramGraph(node_kind=np.zeros(2, np.int64),
                            x=np.ones((2, NUM_NODE_FEATURES), np.float32),
                            edge_index=np.array([[0], [1]]), edge_type=np.zeros(1, np.int64),
                            program=program)

    graphs, latencies = [graph(10.0), graph(20.0), graph(12.0)], [1e-4, 2e-1, 3e-4]
    norm = Normalization.fit(graphs, latencies, per_flop=per_flop)
    again = Normalization.from_dict(norm.to_dict())
    assert again.per_flop == per_flop and again.predicts_latency
    for g, lat, y in zip(graphs, latencies, again.targets(graphs, latencies, [0, 1, 2])):
        data = again.data(g, y=y)
        assert math.isclose(float(again.latency(data.y, data.offset)[0]), lat, rel_tol=1e-5)
    # per FLOP, the targets leave out the programs' log FLOPs
    offsets = [norm.offset(g) for g in graphs]
    assert offsets == ([0.0] * 3 if not per_flop else [10 * math.log(2), 20 * math.log(2),
                                                        12 * math.log(2)])


def _graphs(n):
    from costmodel.featurize import NUM_NODE_FEATURES, NUM_PROGRAM_FEATURES, ProgramGraph

    return [ProgramGraph(node_kind=np.zeros(2, np.int64),
                         x=np.full((2, NUM_NODE_FEATURES), float(i), np.float32),
                         edge_index=np.array([[0], [1]]), edge_type=np.zeros(1, np.int64),
                         program=np.zeros(NUM_PROGRAM_FEATURES, np.float32)) for i in range(n)]


def test_store_rows_are_standardised_with_the_training_statistics():
    from torch_geometric.data import Batch

    from costmodel.normalization import Normalization

    graphs = _graphs(3)
    rows = [np.array([[1.0, 5.0]], np.float32), np.zeros((0, 2), np.float32),
            np.array([[3.0, 5.0], [5.0, 5.0]], np.float32)]
    for g, r in zip(graphs, rows):
        g.store_x = r
    norm = Normalization.from_dict(Normalization.fit(graphs, [1e-3, 2e-3, 3e-3]).to_dict())
    np.testing.assert_allclose(norm.store_mean, [3.0, 5.0])
    np.testing.assert_allclose(norm.store_std, [np.sqrt(8 / 3), 0.0], atol=1e-5)
    batch = Batch.from_data_list([norm.data(g) for g in graphs])
    assert batch.store_count.tolist() == [1, 0, 2]
    np.testing.assert_allclose(batch.store_x[:, 0].numpy(), np.array([-2, 0, 2]) / np.sqrt(8 / 3),
                               rtol=1e-5)
    assert torch.all(batch.store_x[:, 1] == 0)  # a constant feature stays at 0
    plain = Normalization.fit(_graphs(3), [1e-3, 2e-3, 3e-3])
    assert plain.store_mean is None and not hasattr(plain.data(graphs[0]), "store_x")
    with pytest.raises(ValueError, match="Featurizer\\(stores=True\\)"):
        norm.data(_graphs(1)[0])


def test_warp_rows_join_the_node_features_standardised():
    """A normalisation fitted on graphs with warp rows appends them, standardised, to each
    node's features: the input of a model with `num_warp_features`; without them nothing is
    appended, and a graph without rows is refused by one that has them."""
    from torch_geometric.data import Batch

    from costmodel.featurize import NUM_NODE_FEATURES
    from costmodel.normalization import Normalization

    graphs = _graphs(3)
    for i, g in enumerate(graphs):
        g.warp_x = np.array([[0.0, 1.0 + i], [2.0, 1.0 + i]], np.float32)
    norm = Normalization.from_dict(Normalization.fit(graphs, [1e-3, 2e-3, 3e-3]).to_dict())
    np.testing.assert_allclose(norm.warp_mean, [1.0, 2.0])
    batch = Batch.from_data_list([norm.data(g) for g in graphs])
    assert batch.x.shape == (6, NUM_NODE_FEATURES + 2) and not hasattr(batch, "warp_x")
    np.testing.assert_allclose(batch.x[:, NUM_NODE_FEATURES].numpy(), [-1, 1] * 3, rtol=1e-5)
    np.testing.assert_allclose(batch.x[:2, -1].numpy(), [-np.sqrt(1.5)] * 2, rtol=1e-5)
    model = GraphSAGECostModel(3, NUM_NODE_FEATURES, 2, hidden=8, num_warp_features=2)
    assert model.architecture["num_warp_features"] == 2
    assert model.feature_proj.in_features == NUM_NODE_FEATURES + 2
    assert "num_warp_features" not in GraphSAGECostModel(3, 3, 2).architecture  # as before
    plain = Normalization.fit(_graphs(3), [1e-3, 2e-3, 3e-3])
    assert plain.warp_mean is None
    assert plain.data(graphs[0]).x.shape == (2, NUM_NODE_FEATURES)  # rows a model does not read
    with pytest.raises(ValueError, match="Featurizer\\(warps=True\\)"):
        norm.data(_graphs(1)[0])


def test_per_workload_normalization_standardises_each_workload():
    from costmodel.normalization import Normalization

    # workload a around 1 ms, b around 1 s: per workload the targets ignore that gap
    workloads = ["a", "a", "a", "b", "b", "b", "b"]
    latencies = [1e-3, 2e-3, 4e-3, 1.0, 3.0, 2.0, 0.5]
    graphs = _graphs(len(latencies))
    norm = Normalization.fit(graphs, latencies, workloads=workloads)
    assert norm.per_workload and not norm.predicts_latency and norm.y_mean == 0.0
    y = norm.targets(graphs, latencies, workloads)
    for w in "ab":
        part = y[np.array(workloads) == w]
        assert abs(part.mean()) < 1e-9 and part.std() == pytest.approx(1.0, abs=1e-5)
    np.testing.assert_allclose(y[:3], [-np.sqrt(1.5), 0.0, np.sqrt(1.5)], atol=1e-5)  # by hand
    # y_std is the pooled within-workload spread of log-latency
    log = np.log(latencies)
    res = np.concatenate([log[:3] - log[:3].mean(), log[3:] - log[3:].mean()])
    assert norm.y_std == pytest.approx(np.sqrt(np.mean(res ** 2)), rel=1e-5)
    # predictions map back to scores in the same order as the latencies of each workload
    scores = norm.log_latency(torch.tensor(y, dtype=torch.float32), torch.zeros(len(y)))
    for w in "ab":
        mask = np.array(workloads) == w
        assert (np.argsort(scores[mask]) == np.argsort(np.array(latencies)[mask])).all()
    # the checkpoint's dict carries it; a dict from before it existed means latency
    again = Normalization.from_dict(norm.to_dict())
    assert again.per_workload and not again.predicts_latency
    old = {k: v for k, v in norm.to_dict().items() if k != "per_workload"}
    assert Normalization.from_dict(old).predicts_latency


def test_forward_and_losses_create_no_tensor_on_the_default_device():
    """On a GPU, a tensor made inside forward or a loss without naming a device lands on the
    CPU beside CUDA ones and the step fails. Without a GPU: model and batch on the CPU, the
    default device set to "meta"; a tensor made without a device would be a meta tensor, and
    mixing it with the CPU ones raises (as the deliberate slip at the end shows)."""
    torch.manual_seed(0)
    model = GraphSAGECostModel(num_node_kinds=3, num_node_features=3, num_edge_types=2,
                               num_program_features=2, hidden=8)
    inputs = (*_tiny_batch(), torch.ones(2, 2))
    target, group = torch.tensor([0.5, -0.5]), torch.tensor([0, 0])
    with torch.device("meta"):
        pred = model(*inputs)
        assert pred.device.type == "cpu" and model.embed(*inputs).device.type == "cpu"
        for kind in RANK_LOSSES.names():
            loss, parts = cost_model_loss(pred, target, group, 1.0, 1.0, kind)
            assert loss.device.type == "cpu" and parts["rank"].device.type == "cpu"
            loss.backward(retain_graph=True)
        assert delta_ndcg(pred, target, group).device.type == "cpu"
        with pytest.raises(RuntimeError, match="meta"):
            pred + torch.ones(2)  # the slip this test catches
