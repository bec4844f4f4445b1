import pytest

from costmodel import metrics

# two workloads: a has candidates with latency 1, 2, 4; b has 10, 20
T = ["a", "a", "a", "b", "b"]
L = [1.0, 2.0, 4.0, 10.0, 20.0]


def test_perfect_prediction():
    got = metrics.all_metrics(T, L, L)
    assert got["ape"] == 0 and got["mape"] == 0
    assert got["kendall_tau"] == pytest.approx(1.0) and got["opa"] == 1.0
    assert got["top1_score"] == 1.0 and got["top5_score"] == 1.0 and got["apeak32"] == 1.0


def test_reversed_prediction_by_hand():
    y = [4.0, 2.0, 1.0, 20.0, 10.0]  # ranks exactly backwards within each workload
    # model picks L=4 (a) and L=20 (b): regret |24 - 11| / 11
    assert metrics.ape(T, L, y) == pytest.approx(100 * 13 / 11)
    assert metrics.kendall_tau(T, L, y) == pytest.approx(-1.0)
    assert metrics.opa(T, L, y) == 0.0
    assert metrics.top_k_score(T, L, y, 1) == pytest.approx(11 / 24)
    # top-2 of a is {4, 2} -> 2; top-2 of b is both -> 10
    assert metrics.top_k_score(T, L, y, 2) == pytest.approx(11 / 12)
    # a: speeds 1, .5, .25 in predicted order .25, .5, 1 -> running max .25, .5, 1 -> mean 7/12
    # b: speeds .5, 1 -> running max .5, 1 -> mean 3/4
    assert metrics.apeak_at_k(T, L, y, k=32) == pytest.approx((7 / 12 + 3 / 4) / 2)


def test_mape_and_weights():
    assert metrics.mape([1.0, 2.0], [1.5, 1.0]) == pytest.approx(50.0)
    y = [1.0, 2.0, 4.0, 20.0, 10.0]  # a perfect, b wrong
    # weighted top-1: (w_a*1 + w_b*10) / (w_a*1 + w_b*20)
    assert metrics.top_k_score(T, L, y, 1, weight=[3, 3, 3, 1, 1]) == pytest.approx(13 / 23)


def test_ties_and_bad_input():
    assert metrics.opa(["a", "a", "a"], [1.0, 1.0, 2.0], [1.0, 2.0, 3.0]) == 1.0
    with pytest.raises(ValueError, match="finite and positive"):
        metrics.ape(["a"], [0.0], [1.0])
