"""The mixed prior of bo-mix, replayed on measured schedules of the committed dataset: each
round the surrogate is refitted on what was "measured" so far (the records' real latencies)
and the acquisition picks the next 8 of the pool, as `BayesOptSearch` does."""

import os
import types

import numpy as np
import pytest

pytestmark = pytest.mark.slow  # a minute of GP fits

from tuning.search import MIX_MIN_MEASURED, BayesOptSearch, PriorMix

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "data", "llvm-full")
BUDGET, PER_ROUND = 48, 8


@pytest.fixture(scope="module")
def workloads():
    """Log-latencies of the measured schedules of six workloads of different families."""
    from datagen.records import read_records

    frame = read_records(DATA, ["workload_key", "family", "status", "latency_median"])
    frame = frame[frame.status == "ok"]
    out = []
    for family in ["conv2d", "dense", "depthwise_conv2d", "softmax", "batch_matmul",
                   "layer_norm"]:
        key = sorted(frame[frame.family == family].workload_key.unique())[0]
        out.append(np.log(frame[frame.workload_key == key].latency_median.to_numpy(float)))
    return out


def mix(companion: bool, xgb: bool = False, kind: str = "lightgbm") -> PriorMix:
    # the mixture itself needs no network: only whether the predictor has a companion, and which
    predictor = types.SimpleNamespace(
        companion=types.SimpleNamespace(names=[kind]) if companion else None)
    return PriorMix(predictor, seed=0, xgb=object() if xgb else None)


def replay(y: np.ndarray, parts: np.ndarray, seed: int, companion: bool = False) -> float:
    """The best log-latency `BayesOptSearch`'s own selection finds in BUDGET picks from a pool
    of the workload's measured schedules (its rounds' draws replaced by that fixed pool)."""
    rng = np.random.default_rng(seed)
    order = rng.permutation(len(y))  # the dataset's order (random rounds first) tells nothing
    y, parts = y[order], parts[order]
    x = list(rng.standard_normal((len(y), 4)))  # embeddings that tell nothing
    search = BayesOptSearch(types.SimpleNamespace(), "prior-mix", seed=seed)
    search.surrogate = mix(companion)
    search.surrogate.seen_parts = list(parts)
    search.pool, search.pool_x, search.pool_prior = list(range(len(y))), x, list(parts)
    search.measured, search.round = [], 0
    while len(search.measured) < BUDGET:
        picks = search._select(PER_ROUND)
        for i in sorted(picks, reverse=True):
            cand = search.pool[i]
            search.measured.append((cand, search.pool_x[i], search.pool_prior[i], y[cand]))
            del search.pool[i], search.pool_x[i], search.pool_prior[i]
        search.round += 1
    return float(min(m[3] for m in search.measured))


def random_search(y: np.ndarray, seeds=range(20)) -> float:
    """The median best log-latency of random search over BUDGET picks."""
    return float(np.median([y[np.random.default_rng(s).permutation(len(y))[:BUDGET]].min()
                            for s in seeds]))


def test_a_wrong_prior_loses_its_weight_and_bo_is_no_worse_than_random(workloads):
    regrets = []
    for y in workloads:
        wrong = (-y + 0.05 * np.random.default_rng(1).standard_normal(len(y)))[:, None]
        found = np.median([replay(y, wrong, seed) for seed in range(4)])
        regrets.append(found - random_search(y))
        surrogate = mix(False)
        surrogate.seen_parts = list(wrong)
        x = list(np.random.default_rng(0).standard_normal((len(y), 4)))
        surrogate.fit(x, x[:16], wrong[:16], y[:16])
        assert not surrogate.weights.any()  # a prior that ranks backwards has no say
    # over the workloads, no worse than random search (log-latency: 0.02 is 2%)
    assert np.mean(regrets) <= 0.03, regrets


def test_a_perfect_prior_finds_the_best_at_once(workloads):
    for y in workloads:
        perfect = y[:, None]
        assert replay(y, perfect, seed=0) == y.min()  # what the prior alone picks first


def test_the_weights_follow_the_part_that_ranks_the_measurements(workloads):
    y = workloads[0]
    rng = np.random.default_rng(0)
    good = y + 0.1 * rng.standard_normal(len(y))
    bad = rng.standard_normal(len(y))
    parts = np.stack([bad, good], axis=1)  # the network wrong, the companion right
    surrogate = mix(True)
    assert surrogate.names == ["network", "lightgbm"]
    assert np.allclose(surrogate.weights, 0.5)  # equal before any measurement
    surrogate.seen_parts = list(parts)
    measured = rng.permutation(len(y))[:MIX_MIN_MEASURED * 4]
    x = list(rng.standard_normal((len(y), 4)))
    surrogate.fit(x, [x[i] for i in measured], parts[measured], y[measured])
    assert surrogate.weights[1] > 0.8
    assert surrogate.weight_log[-1]["measured"] == len(measured)
    # mapped onto log-latency: the mixed prior of the measured rows tracks their latencies
    assert np.corrcoef(surrogate.prior(parts[measured]), y[measured])[0, 1] > 0.8
    assert mix(True, xgb=True).names == ["network", "lightgbm", "xgb"]
    # a companion that is the XGBModel itself is one part, not two
    both = mix(True, xgb=True, kind="xgb")
    assert both.names == ["network", "xgb"] and both.xgb is None
