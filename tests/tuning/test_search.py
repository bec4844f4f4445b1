"""The BO surrogate's posterior, the acquisition functions and the registries of tuning
pieces, on numbers made here (no tuning run; see test_tune.py for those)."""

import math
import os
import re

import numpy as np
import pytest

from datagen.errors import UserError
from datagen.grid import read_json
from tuning.compare import RESULTS_FILE
from tuning.search import PRIOR_SIGMA, SURROGATES, PriorGP, acquisition_scores
from tuning.tuner import TUNERS, SearchInputs, make_search


def pool(n: int = 60, dims: int = 8, seed: int = 0):
    rng = np.random.default_rng(seed)
    x = rng.normal(size=(n, dims))
    prior = rng.normal(size=n)  # the model's log-latency of each candidate
    truth = prior + 1.0 + 0.3 * np.sin(x[:, 0])  # the model is off by a shift and a bend
    return list(x), prior, truth


def test_prior_gp_is_the_prior_before_any_measurement():
    x, prior, _ = pool()
    gp = PriorGP(None, seed=0)
    gp.fit(x, [], np.zeros(0), np.zeros(0))
    mu, sigma = gp.posterior(x, prior)
    np.testing.assert_array_equal(mu, prior)
    np.testing.assert_array_equal(sigma, np.full(len(x), PRIOR_SIGMA))


def test_prior_gp_is_pulled_toward_measurements():
    x, prior, truth = pool()
    measured = np.arange(15)
    gp = PriorGP(None, seed=0)
    gp.fit(x, [x[i] for i in measured], prior[measured], truth[measured])
    mu, sigma = gp.posterior(x, prior)
    rest = np.arange(15, len(x))
    assert np.abs(mu[measured] - truth[measured]).max() < 0.2  # it fits what it measured
    # and what it learned (mostly the shift) carries over to the unmeasured candidates
    assert np.abs(mu[rest] - truth[rest]).mean() < 0.5 * np.abs(prior[rest] - truth[rest]).mean()
    assert sigma[measured].mean() < sigma[rest].mean()  # surer where it measured


def test_acquisition_functions():
    mu, sigma = np.array([0.0, 0.0, -1.0]), np.array([0.1, 1.0, 0.1])
    ei = acquisition_scores("ei", mu, sigma, best=0.0, kappa=1.96)
    assert ei[1] > ei[0]  # equal mean: more uncertainty, more expected improvement
    assert ei[2] > ei[1]  # a much better mean wins
    lcb = acquisition_scores("lcb", mu, sigma, best=0.0, kappa=1.96)
    np.testing.assert_allclose(lcb, -(mu - 1.96 * sigma))


def test_registries_name_their_pieces():
    assert TUNERS.names() == ("bo", "bo-evo", "bo-mix", "bo-learn", "ms-default", "ms-xgb-pretrained",
                              "ms-ours", "ms-mix", "random", "ytopt")
    assert [n for n in TUNERS.names() if TUNERS.get(n).needs_checkpoint] == \
        ["bo", "bo-evo", "bo-mix", "bo-learn", "ms-ours", "ms-mix"]
    assert [n for n in TUNERS.names() if TUNERS.get(n).needs_pretrained_xgb] == \
        ["bo-mix", "ms-xgb-pretrained", "ms-mix"]
    assert all(TUNERS.get(n).description for n in TUNERS.names())
    assert SURROGATES.names() == ("prior-gp", "prior-mix", "prior-learn", "forest")
    assert make_search("ms-default", SearchInputs()) == ("evolutionary", "xgb")
    with pytest.raises(UserError, match="unknown tuner 'nope'; choose one of bo, bo-evo, bo-mix, bo-learn, ms-default"):
        make_search("nope", SearchInputs())
    with pytest.raises(UserError, match="tuner 'bo' needs a cost-model checkpoint"):
        make_search("bo", SearchInputs())
    with pytest.raises(UserError, match="needs the pretrained XGBModel"):
        make_search("ms-xgb-pretrained", SearchInputs())
    with pytest.raises(UserError, match="unknown surrogate"):
        from tuning.search import BayesOptSearch

        BayesOptSearch(None, "kriging")


def test_paired_statistics_on_hand_made_runs():
    from tuning.report import paired_stats

    # two workloads x two seeds; bo's finalists are 10% faster except one 5% slower pair
    curves = {w: {"bo": [[3.0, 1.0]] * 2, "ms-default": [[2.0, 1.5]] * 2} for w in ("a", "b")}
    remeasured = {w: {8: {"bo": [[0.9] * 4, [0.9] * 4],
                          "ms-default": [[1.0] * 4, [1.0] * 4]}} for w in ("a", "b")}
    remeasured["b"][8]["bo"][1] = [1.05, 1.05, 1.06, 1.04]
    (row,) = paired_stats(curves, remeasured, trials=2)
    assert (row["ours"], row["baseline"], row["n"]) == ("bo", "ms-default", 4)
    assert (row["wins"], row["ties"], row["losses"]) == (3, 0, 1)
    ratios = [0.9, 0.9, 0.9, 1.05]
    assert row["geomean_ratio"] == pytest.approx(np.exp(np.mean(np.log(ratios))))
    lo, hi = row["ci95"]
    assert 0.9 <= lo <= row["geomean_ratio"] <= hi <= 1.05
    # bo's in-run curve reaches ms-default's 1.5 at its second trial
    assert row["to_reach_median"] == 2 and row["reached"] == "4/4"


def test_bo_mix_is_paired_with_evolution_on_the_same_mixture():
    """The search x model ablation: bo-mix's ratio to ms-mix (the same mixed model, searched by
    EvolutionarySearch) is reported, as bo's to ms-ours is."""
    from tuning.report import paired_stats

    curves = {"a": {"bo-mix": [[2.0, 1.0]], "ms-mix": [[2.0, 1.2]]}}
    remeasured = {"a": {2: {"bo-mix": [[0.8] * 3], "ms-mix": [[1.0] * 3]}}}
    (row,) = paired_stats(curves, remeasured, trials=2)
    assert (row["ours"], row["baseline"], row["wins"]) == ("bo-mix", "ms-mix", 1)
    assert row["geomean_ratio"] == pytest.approx(0.8)


def test_a_tuner_with_a_smaller_budget_is_compared_only_where_it_ran():
    from tuning.report import format_summary, paired_stats, summarize

    # bo ran 2 trials, ms-default 4: bo@2 is compared with ms-default@2 and @4, never bo@4
    curves = {"a": {"bo": [[3.0, 1.0]], "ms-default": [[2.0, 1.5, 1.2, 0.8]]}}
    remeasured = {"a": {2: {"bo": [[1.0] * 3], "ms-default": [[1.5] * 3]},
                        4: {"ms-default": [[0.8] * 3]}}}
    rows = paired_stats(curves, remeasured, trials=4)
    assert [(r["ours_budget"], r["baseline_budget"]) for r in rows] == [(2, 2), (2, 4)]
    assert rows[0]["geomean_ratio"] == pytest.approx(1 / 1.5)
    assert rows[1]["geomean_ratio"] == pytest.approx(1 / 0.8)
    assert rows[1]["to_reach_median"] == math.inf  # bo's 2 trials never reach 0.8
    summary = summarize(curves, remeasured, [2, 4], 4, {"bo": 2, "ms-default": 4})
    bo = summary["workloads"]["a"]["bo"]
    assert "best@4" not in bo and "remeasured@4" not in bo and bo["remeasured@2"] == 1.0
    text = format_summary(summary)
    assert "bo@2 / ms-default@4: ratio 1.250" in text
    bo_row = next(line for line in text.splitlines() if line.startswith("bo "))
    assert bo_row.split()[1:5] == ["1000000.0", "-", "1000000.0", "-"]


def test_the_summary_gives_each_tuners_wall_time_per_trial(tmp_path):
    """From the runs' recorded wall times: per workload the median over seeds of seconds per
    measured trial, over workloads the median; a run that recorded none has no figure."""
    from tuning.report import format_summary, summarize
    from tuning.runs import wall_seconds, write_json

    curves = {"a": {"bo": [[3.0, 1.0], [2.0, 1.0]], "ms-default": [[2.0, 1.5, 1.2, 0.8]] * 2},
              "b": {"bo": [[1.0, 1.0]] * 2, "ms-default": [[1.0] * 4] * 2}}
    walls = {"a": {"bo": [4.0, 8.0], "ms-default": [40.0, None]},
             "b": {"bo": [2.0, 2.0], "ms-default": [None, None]}}
    summary = summarize(curves, {}, [2], 4, walls=walls)
    assert summary["workloads"]["a"]["bo"]["s_per_trial"] == 3.0  # median of 2 and 4
    assert summary["workloads"]["a"]["ms-default"]["s_per_trial"] == 10.0
    assert "s_per_trial" not in summary["workloads"]["b"]["ms-default"]
    assert summary["geomean"]["bo"]["s_per_trial"] == 2.0  # median of 3 and 1
    assert summary["geomean"]["ms-default"]["s_per_trial"] == 10.0
    rows = {line.split()[0]: line.split()[-1] for line in format_summary(summary).splitlines()
            if line.startswith(("bo ", "ms-default "))}
    assert rows == {"bo": "2.00", "ms-default": "10.00"}  # the last rows: over workloads
    assert summarize(curves, {}, [2], 4)["geomean"]["bo"].get("s_per_trial") is None
    # a finished run's marker holds its wall time; one written before does not
    write_json(str(tmp_path / "done"), {"trials": 2, "wall_s": 5.5})
    assert wall_seconds(str(tmp_path)) == 5.5
    write_json(str(tmp_path / "done"), {"trials": 2})
    assert wall_seconds(str(tmp_path)) is None and wall_seconds(str(tmp_path / "no")) is None


def test_the_pretrained_xgbmodel_is_named_by_its_model_not_the_blend_weights_it_carries(
        tmp_path):
    """A blend weight written into the pretrained XGBModel's file (`costmodel blend --with
    xgb`) changes what bo searches with, not what ms-xgb-pretrained does: its runs stay
    read back; another model in the file is another model."""
    import shutil

    import numpy as np

    from costmodel.blend import set_weight
    from tuning.runs import model_ids, same_models
    from tuning.tuner import SearchInputs

    path = str(tmp_path / "m.xgb.npz")
    shutil.copy("checkpoints/graphsage-v3.xgb.npz", path)

    def ids():
        return model_ids(SearchInputs(pretrained_xgb=path))

    before = ids()
    set_weight(path, 0.7, 0.2)
    assert same_models(ids(), before) and ids() != before  # the file changed, the model not
    set_weight(path, None)
    assert same_models(ids(), before)
    # a run recorded before the model's own digest: matched by its file, as it was then
    old = {"pretrained_xgb": {k: v for k, v in ids()["pretrained_xgb"].items()
                              if k != "model_sha256"}}
    assert same_models(old, ids())
    set_weight(path, 0.5)
    assert not same_models(old, ids())
    with np.load(path, allow_pickle=False) as z:
        arrays = {k: z[k] for k in z.files}
    arrays["costs"] = arrays["costs"] * 2
    np.savez(path, **arrays)
    assert not same_models(ids(), before)


def test_bos_search_depth_is_named_with_its_models():
    """A run of bo with another `max_depth` searched otherwise: it is not read back as this one,
    while a tuner that does not mutate bo's way (ms-default) keeps its runs; runs made before
    the option (depth 1) name none and stay read back."""
    from tuning.runs import model_ids, models_used, same_models

    deep, plain = model_ids(SearchInputs(max_depth=3)), model_ids(SearchInputs(max_depth=1))
    assert "search" not in plain and deep["search"]["sha256"] == "3"
    assert not same_models(models_used("bo", deep), models_used("bo", plain))
    assert not same_models(models_used("bo-evo", deep), models_used("bo-evo", plain))
    assert models_used("ms-default", deep) == models_used("ms-default", plain) == {}
    assert same_models(models_used("bo", plain), {})
    wide = model_ids(SearchInputs(parent_share=0.2))
    assert "parents" not in plain and wide["parents"]["sha256"] == "0.2"
    assert not same_models(models_used("bo", wide), models_used("bo", plain))
    assert models_used("ms-default", wide) == {}
    spaced = model_ids(SearchInputs(space_parents=2))
    assert "spaces" not in plain and spaced["spaces"]["sha256"] == "2"
    assert not same_models(models_used("bo", spaced), models_used("bo", plain))


def test_runs_and_pairs_of_other_models_are_not_read_back(tmp_path):
    import json

    from tuning.runs import finished_curve, read_pair, write_json

    mine = {"checkpoints": [{"file": "a.ckpt", "sha256": "1"}]}
    other = {"checkpoints": [{"file": "a.ckpt", "sha256": "2"}]}
    (tmp_path / "done").write_text(json.dumps({"trials": 0, "models": mine}))
    assert finished_curve(str(tmp_path), 8, mine) == []
    assert finished_curve(str(tmp_path), 8, other) is None
    (tmp_path / "done").write_text("8\n")  # a run that did not say which models it used
    assert finished_curve(str(tmp_path), 8, mine) is None
    pair = {"rounds": 3, "tuner_trials": {"bo": 8}, "models": mine, "budgets": {"8": {}}}
    (tmp_path / "pair.json").write_text(json.dumps(pair))
    path = str(tmp_path / "pair.json")
    assert read_pair(path, {"bo": 8}, [8], 3, mine) == pair
    assert read_pair(path, {"bo": 8}, [8], 3, other) is None
    assert read_pair(path, {"bo": 16}, [8], 3, mine) is None
    assert read_pair(path, {"bo": 8}, [8, 16], 3, mine) is None
    # the same model found under another file name is the same model
    renamed = {"checkpoints": [{"file": "b.ckpt", "sha256": "1"}]}
    assert read_pair(path, {"bo": 8}, [8], 3, renamed) == pair
    assert read_pair(path, {"bo": 8}, [8], 3, {**mine, "pretrained_xgb": {"file": "x",
                                                                           "sha256": "3"}}) is None
    # pairs are written xz-compressed and read back as they were; a damaged one is no pair
    packed = str(tmp_path / "pairs" / "pair.json.xz")
    write_json(packed, pair)
    assert open(packed, "rb").read(6) == b"\xfd7zXZ\x00"
    assert read_pair(packed, {"bo": 8}, [8], 3, mine) == pair
    with open(packed, "r+b") as f:
        f.truncate(20)
    with pytest.raises(UserError, match=r"pair.json.xz is damaged \(.*\); delete it"):
        read_pair(packed, {"bo": 8}, [8], 3, mine)


def test_a_report_reads_finished_pairs_and_tunes_nothing(tmp_path):
    import json

    from datagen.suites import resolve
    from tuning.compare import run_curves
    from tuning.runs import pair_file
    from tuning.tuner import SearchInputs

    done, waiting = resolve(["dense/m128_n768_k768", "softmax/rows1536_cols128"])
    pair = {"rounds": 2, "tuner_trials": {"bo": 4, "random": 8}, "models": {},
            "target": "{}", "curves": {"bo": [3.0, 2.0, 2.0, 1.0], "random": [4.0] * 8},
            "budgets": {"4": {"bo": [1.0, 1.1], "random": [4.0, 4.1]},
                        "8": {"random": [4.0, 4.0]}}}
    path = pair_file(str(tmp_path), done.key, 1)
    os.makedirs(os.path.dirname(path))
    with open(path.removesuffix(".xz"), "w") as f:  # written before pairs were compressed
        json.dump(pair, f)
    # no measurer: tuning anything would fail
    results, remeasured = run_curves([done, waiting], ["bo", "random"], 8, [0, 1],
                                     str(tmp_path), None, None, SearchInputs(), 4,
                                     remeasure_budgets=[4, 8], rounds=2,
                                     tuner_trials={"bo": 4}, finished_only=True)
    assert list(results) == [done.key] and results[done.key]["bo"] == [pair["curves"]["bo"]]
    assert remeasured[done.key] == {4: {"bo": [[1.0, 1.1]], "random": [[4.0, 4.1]]},
                                    8: {"random": [[4.0, 4.0]]}}
    saved = read_json(str(tmp_path / RESULTS_FILE))
    assert saved["pair_seeds"] == {done.key: [1]}
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow
def test_a_run_or_pair_measured_on_another_device_stops_the_comparison(tmp_path):
    """A comparison's runs share one device: a finished run that says it was measured on
    another one (a GPU, where this host measures on its CPU) stops the comparison before
    anything is tuned, in one line, and is kept; so does such a pair. A report never puts pairs
    of two devices in one table; pairs that recorded no device are read as before."""
    import json

    from datagen.errors import UserError
    from datagen.measure import Measurer, device_name
    from datagen.suites import resolve
    from datagen.tvm_env import make_target
    from tuning.compare import run_curves
    from tuning.runs import pair_file, run_dir, write_json
    from tuning.tuner import SearchInputs

    first, second = resolve(["dense/m128_n768_k768", "softmax/rows1536_cols128"])
    out = str(tmp_path)
    gpu = {"kind": "cuda", "model": "NVIDIA H100 80GB HBM3", "compute": "9.0"}
    done = os.path.join(run_dir(out, second.key, "bo", 0), "done")
    os.makedirs(os.path.dirname(done))
    with open(done, "w") as f:
        json.dump({"trials": 4, "models": {}, "device": gpu}, f)
    target = make_target(None)
    measurer = Measurer(target, protocol={"repeat": 2, "min_repeat_ms": 1})
    try:
        assert device_name(measurer.device) == measurer.device["model"] != gpu["model"]
        with pytest.raises(UserError, match=re.escape(
                f"{done} was measured on NVIDIA H100 80GB HBM3 and this host measures on "
                f"{measurer.device['model']}: a comparison's runs share one device")):
            run_curves([first, second], ["random", "bo"], 4, [0], out, target, measurer,
                       SearchInputs(), 2, progress=False, rounds=2)
        os.remove(done)
        pair = {"rounds": 2, "tuner_trials": {"bo": 4}, "models": {}, "target": "{}",
                "curves": {"bo": [3.0, 2.0, 2.0, 1.0]}, "budgets": {"4": {"bo": [1.0, 1.1]}},
                "device": gpu}
        write_json(pair_file(out, second.key, 0), pair)
        with pytest.raises(UserError, match="was measured on NVIDIA H100 80GB HBM3"):
            run_curves([first, second], ["bo"], 4, [0], out, target, measurer,
                       SearchInputs(), 2, progress=False, rounds=2)
    finally:
        measurer.close()
    # nothing tuned: no run of either workload but the one written here
    assert os.listdir(os.path.join(out, "runs")) == [second.key.replace("/", "__")]
    assert os.listdir(os.path.join(out, "runs", second.key.replace("/", "__"))) == ["bo"]
    assert os.listdir(os.path.dirname(done)) == []

    def report():
        return run_curves([first, second], ["bo"], 4, [0], out, None, None, SearchInputs(), 4,
                          rounds=2, finished_only=True)

    # made before pairs named a device
    write_json(pair_file(out, first.key, 0), {k: v for k, v in pair.items() if k != "device"})
    results, _ = report()
    assert list(results) == [first.key, second.key]
    assert read_json(str(tmp_path / RESULTS_FILE))["devices"] == {
        first.key: [None], second.key: [gpu["model"]]}
    write_json(pair_file(out, first.key, 0), {**pair, "device": {"kind": "cuda",
                                                                 "model": "NVIDIA H200"}})
    with pytest.raises(UserError, match=r"measured on different devices \(NVIDIA H100 80GB "
                       r"HBM3, NVIDIA H200\)"):
        report()


def test_a_report_reads_pairs_of_other_models_but_never_mixes_two(tmp_path):
    """A report shows what was measured, whatever model measured it (its results file names it),
    but pairs of two different models are one error, not one table."""
    from datagen.errors import UserError
    from datagen.suites import resolve
    from tuning.compare import run_curves
    from tuning.runs import pair_file, write_json
    from tuning.tuner import SearchInputs

    first, second = resolve(["dense/m128_n768_k768", "softmax/rows1536_cols128"])
    old = {"checkpoints": [{"file": "gpu.ckpt", "sha256": "old"}]}
    pair = {"rounds": 2, "tuner_trials": {"bo": 4}, "models": old, "target": "{}",
            "curves": {"bo": [3.0, 2.0, 2.0, 1.0]}, "budgets": {"4": {"bo": [1.0, 1.1]}}}
    for w in (first, second):
        write_json(pair_file(str(tmp_path), w.key, 0), pair)

    def report():
        return run_curves([first, second], ["bo"], 4, [0], str(tmp_path), None, None,
                          SearchInputs(), 4, rounds=2, finished_only=True)

    results, _ = report()  # SearchInputs() has no models: the pairs' are other ones
    assert list(results) == [first.key, second.key]
    assert read_json(str(tmp_path / RESULTS_FILE))["models"] == old
    write_json(pair_file(str(tmp_path), second.key, 0),
               {**pair, "models": {"checkpoints": [{"file": "gpu.ckpt", "sha256": "new"}]}})
    with pytest.raises(UserError, match="were made with different models"):
        report()


def test_generations_evolve_the_pool_from_what_the_posterior_ranks_fastest():
    """With `generations`, a round's pool also holds children of the unmeasured candidates the
    surrogate's posterior ranks fastest, each generation from the pool as it then stands: new
    schedules (none seen before), scored like the rest, and nothing is measured to get them."""
    import types

    from datagen.sampler import ScheduleSampler, trace_hash
    from datagen.suites import resolve
    from datagen.tvm_env import make_target
    from tuning.search import BayesOptSearch, Surrogate

    class Fixed(Surrogate):  # a prior that ranks schedules by a fixed function of their trace
        fits = 0

        def features(self, cands):
            return [np.zeros(2) for _ in cands], np.array(
                [int(c.trace_hash[:6], 16) for c in cands], float)

        def fit(self, x_all, x, prior, y):
            Fixed.fits += 1

        def posterior(self, x, prior):
            return np.asarray(prior, float), np.ones(len(prior))

    (w,) = resolve(["dense/m32_n32_k32"])
    search = BayesOptSearch(None, "forest", pool_size=16, generations=2, children=4,
                            num_parents=3, seed=0)
    search.context = types.SimpleNamespace(task_name="dense")
    search.sampler = ScheduleSampler(w.mod, make_target(None))
    search.surrogate = Fixed(None, 0)
    search.seen, search.pool, search.pool_x, search.pool_prior = set(), [], [], []
    search.measured, search.round = [], 0
    parents_of = []
    evolve = search.sampler.evolve
    search.sampler.evolve = lambda parents, *rest, **kw: parents_of.append(
        (parents, [c.trace_hash for c in search.pool])) or evolve(parents, *rest, **kw)
    search._grow_pool()
    assert len(parents_of) == 2 and len(search.pool) == 16 + 4 + 4
    hashes = [c.trace_hash for c in search.pool]
    assert len(set(hashes)) == len(hashes) == len(search.seen)
    prior = dict(zip(hashes, search.pool_prior))
    for parents, pool in parents_of:  # each generation's parents: the pool's 3 fastest then
        fastest = sorted(pool, key=prior.get)[:3]
        assert [trace_hash(p) for p in parents] == fastest
    children = search.pool[16:]
    assert {c.origin for c in children} == {"evolved"}
    assert {c.parent_hash for c in children[:4]} <= set(sorted(hashes[:16], key=prior.get)[:3])
    assert Fixed.fits == 1  # the round's generations share one fit
    with pytest.raises(UserError, match="generations must be at least 0"):
        BayesOptSearch(None, "forest", generations=-1)


def _bare_search(**options):
    """A `BayesOptSearch` over dense/m32_n32_k32 (3 design spaces: its output cached or not, at
    two levels) as MetaSchedule would set it up, with a surrogate that scores every candidate
    alike, nothing measured yet: its pool grown by hand."""
    import types

    from datagen.sampler import ScheduleSampler
    from datagen.suites import resolve
    from datagen.tvm_env import make_target
    from tuning.search import BayesOptSearch, Surrogate

    class Flat(Surrogate):
        def features(self, cands):
            return [np.zeros(2) for _ in cands], np.zeros(len(cands))

    (w,) = resolve(["dense/m32_n32_k32"])
    search = BayesOptSearch(None, "forest", evolve_fraction=0.5, num_parents=2, seed=0,
                            **options)
    search.context = types.SimpleNamespace(task_name="dense")
    search.sampler = ScheduleSampler(w.mod, make_target(None))
    search.surrogate = Flat(None, 0)
    search.seen, search.pool, search.pool_x, search.pool_prior = set(), [], [], []
    search.round = 0
    return search


@pytest.mark.parametrize("max_depth", [1, 3])
def test_once_the_parents_neighbours_are_all_seen_the_evolved_share_goes_deeper(max_depth):
    """bo mutates its best measured schedules; their one-mutation neighbourhood is a few hundred
    schedules, used up in a few rounds while the best stays the same. Then, with `max_depth`,
    the round's evolved share is two or three mutations from them instead of none."""
    from tuning.search import BayesOptSearch

    search = _bare_search(pool_size=16, max_depth=max_depth)
    parents = search.sampler.random(2, seed=1, seen=search.seen)
    search.measured = [(c, None, 0.0, float(i)) for i, c in enumerate(parents)]
    for seed in range(20):  # every one-mutation neighbour of the parents seen
        if not search.sampler.evolve([c.trace_json for c in parents], 64, seed, search.seen):
            break
    search._grow_pool()
    evolved = [c for c in search.pool if c.origin == "evolved"]
    assert len(search.pool) - len(evolved) == 8
    assert len(evolved) == (8 if max_depth == 3 else 0)
    assert {c.parent_hash for c in evolved} <= {c.trace_hash for c in parents}
    with pytest.raises(UserError, match="max_depth at least 1"):
        BayesOptSearch(None, "forest", max_depth=0)


def test_the_mixture_cost_model_follows_the_part_that_ranks_the_measurements():
    """ms-mix's cost model: before any measurement the network and its companion weigh
    alike; once the run's measurements show the companion ranks them and the network ranks
    them backwards, EvolutionarySearch's scores follow the companion (higher: faster)."""
    import types

    from tuning.cost_model import MixtureCostModel
    from tuning.search import kendall

    rng = np.random.default_rng(0)
    y = rng.normal(-9, 1, 60)  # every candidate's true log-latency
    emb = rng.standard_normal((60, 4))

    def score_parts(schedules):
        idx = np.array(schedules)
        return -y[idx], -y[idx] + 0.05 * rng.standard_normal(len(idx)), emb[idx]

    predictor = types.SimpleNamespace(target_kind="llvm", score_parts=score_parts,
                                      companion=types.SimpleNamespace(names=["lightgbm"]))
    model = MixtureCostModel(predictor, seed=0)._inst  # the Python side MetaSchedule calls
    context = types.SimpleNamespace(target=types.SimpleNamespace(
        kind=types.SimpleNamespace(name="llvm")))
    cands = [types.SimpleNamespace(sch=i) for i in range(60)]
    before = model.predict(context, cands[20:])
    assert abs(kendall(before, -y[20:])) < 0.3  # a right and a wrong part, alike: no ranking
    ok = [types.SimpleNamespace(run_secs=[float(np.exp(v))] * 3, error_msg=None) for v in y[:20]]
    ok[0] = types.SimpleNamespace(run_secs=None, error_msg="build error")  # not a measurement
    model.update(context, cands[:20], ok)
    assert len(model.measured) == 19
    assert model.surrogate.weights[1] > 0.9  # the companion's
    after = model.predict(context, cands[20:])
    assert kendall(after, -y[20:]) > 0.8 and (after > 0).all()
    other = types.SimpleNamespace(target=types.SimpleNamespace(
        kind=types.SimpleNamespace(name="cuda")))
    with pytest.raises(UserError, match="trained for llvm targets, not cuda"):
        model.predict(other, cands[:2])


@pytest.mark.parametrize("parent_share", [0.0, 0.5])
def test_a_share_of_parents_mutates_more_of_the_fastest_measured(parent_share):
    """bo mutates its `num_parents` fastest measured schedules; with `parent_share` it mutates
    that share of them instead, the fastest, once the share is more (as MetaSchedule's
    evolution starts from its best fifth measured)."""
    from tuning.search import BayesOptSearch

    search = _bare_search(pool_size=32, parent_share=parent_share)
    measured = search.sampler.random(8, seed=1, seen=search.seen)
    search.measured = [(c, None, 0.0, float(i)) for i, c in enumerate(measured)]  # fastest first
    search._grow_pool()
    parents = {c.parent_hash for c in search.pool if c.origin == "evolved"}
    fastest = [c.trace_hash for c in measured]
    assert parents <= set(fastest[:4 if parent_share else 2])
    assert len(parents) > 2 if parent_share else len(parents) == 2
    with pytest.raises(UserError, match="parent_share is a share"):
        BayesOptSearch(None, "forest", parent_share=1.5)


def test_the_fastest_of_each_design_space_are_parents_too():
    """With `space_parents`, bo also mutates the fastest measured schedules of each design
    space, not only the fastest overall (which may all share one space), and every child keeps
    its parent's space, as MetaSchedule's mutations do."""
    from tuning.search import BayesOptSearch

    for per_space in (0, 1):
        search = _bare_search(pool_size=64, space_parents=per_space)
        assert len(search.sampler.spaces) > 1
        drawn = search.sampler.random(24, seed=1, seen=search.seen)
        assert {c.space for c in drawn} == set(range(len(search.sampler.spaces)))
        # the fastest two from one space, the others slower
        first = drawn[0].space
        drawn.sort(key=lambda c: c.space != first)
        search.measured = [(c, None, 0.0, float(i)) for i, c in enumerate(drawn)]
        search._grow_pool()
        evolved = [c for c in search.pool if c.origin == "evolved"]
        parent = {c.trace_hash: c for c in drawn}
        assert evolved and all(c.space == parent[c.parent_hash].space for c in evolved)
        spaces = {c.space for c in evolved}
        assert spaces == ({drawn[0].space} if not per_space
                          else set(range(len(search.sampler.spaces))))
    with pytest.raises(UserError, match="space_parents must be at least 0"):
        BayesOptSearch(None, "forest", space_parents=-1)
