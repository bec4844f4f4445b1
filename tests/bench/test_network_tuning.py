"""The whole-network part of the tuning bench: its summary of finished pairs (made here, not
tuned), the report that reads them back, and its bad input."""

import json
import math
import os

import pytest

from conftest import bench_module, run_bench


def network_tuning():
    """The bench's sibling module, loaded from its file (bench/ is no package)."""
    return bench_module("network_tuning.py")


def pair(network, seed, per_task, latency_us, walls=None):
    """A finished (network, seed, budget) as `network_tuning.run_pair` writes it: 3 rounds."""
    return {"network": network, "seed": seed, "per_task": per_task, "tasks": 5, "rounds": 3,
            "runs": {t: {"budget": per_task * 5, "wall_s": (walls or {}).get(t, 10.0)}
                     for t in latency_us},
            "latency": {t: [us * 1e-6 * f for f in (1.0, 1.01, 0.99)]
                        for t, us in latency_us.items()}}


PAIRS = [pair("cnn", 0, 16, {"bo": 90, "ms-default": 120}, {"bo": 20.0, "ms-default": 80.0}),
         pair("cnn", 0, 64, {"bo": 80, "ms-default": 100}),
         pair("cnn", 1, 16, {"bo": 108, "ms-default": 100}),
         pair("cnn", 1, 64, {"bo": 70, "ms-default": 100})]


def test_the_summary_of_whole_networks():
    bench = network_tuning()
    summary = bench.summarize(PAIRS, ["bo", "ms-default"])
    bo, ref = summary["networks"]["cnn"]["bo"], summary["networks"]["cnn"]["ms-default"]
    assert bo["latency_us@16"] == pytest.approx(99.0) and bo["latency_us@64"] == pytest.approx(75)
    assert ref["latency_us@64"] == pytest.approx(100.0)
    # bo's median at 16 per task beats ms-default's at 64: reached at the first budget
    assert bo["reaches_reference_at"] == 16 and ref["reaches_reference_at"] == 64
    # the median over its runs of wall time over trials: 20/80, 10/320, 10/80 and 10/320
    assert bo["wall_s_per_trial"] == pytest.approx((10 / 320 + 10 / 80) / 2) and bo["tasks"] == 5
    # bo's ratio to ms-default on this network, over its two seeds
    assert ref["bo_ratio@16"] == pytest.approx(math.sqrt(0.75 * 1.08)) and "bo_ratio@16" not in bo
    at16, at64 = summary["paired"]
    assert (at16["per_task"], at64["per_task"]) == (16, 64)
    assert at16["ratios"] == pytest.approx([0.75, 1.08]) and at16["wins"] == at16["losses"] == 1
    assert at16["geomean_ratio"] == pytest.approx(math.sqrt(0.75 * 1.08))
    assert at64["ratios"] == pytest.approx([0.8, 0.7]) and at64["wins"] == 2
    assert at64["ci95"][0] <= at64["geomean_ratio"] <= at64["ci95"][1] < 1
    text = bench.format_summary(summary)
    assert "-- cnn (5 tasks)" in text and "bo / ms-default at 64 trials per task" in text


def test_the_summary_says_which_pairs_were_timed_with_the_runners_threads():
    # a cell with "threads" timed its networks as the runner timed the tasks; one without, in
    # the bench's own process with the TVM runtime's default threads
    pairs = [*PAIRS[:3], {**PAIRS[3], "threads": 2}]
    summary = network_tuning().summarize(pairs, ["bo", "ms-default"])
    at16, at64 = summary["paired"]
    assert (at16["runner_threads"], at64["runner_threads"]) == (0, 1)
    lines = network_tuning().format_summary(summary).splitlines()
    assert [line[line.index("["):] for line in lines if "[" in line] == [
        "[0 of 2 timed with the runner's threads]", "[1 of 2 timed with the runner's threads]"]
    every = network_tuning().summarize([{**p, "threads": 2} for p in PAIRS], ["bo", "ms-default"])
    assert "timed with the runner's threads" not in network_tuning().format_summary(every)


def test_a_cell_timed_the_old_way_is_kept_as_it_is_where_its_runs_are_gone(tmp_path, capsys):
    # timed in 3 rounds in a fixed order (no "order"), its tuners' runs not on disk: nothing to
    # time again and no reason to tune again (its threads were the runner's), so it is kept
    import types

    from datagen.grid import Grid

    bench = network_tuning()
    grid = Grid(str(tmp_path))
    cell = grid.write(bench.pair_cell("cnn", 0, 16), {**PAIRS[0], "threads": 2})
    measurer = types.SimpleNamespace(num_threads=2)
    assert bench.run_pair("cnn", 0, 16, ["bo", "ms-default"], grid, None, measurer, None,
                          rounds=30) == cell
    assert "its runs are not on disk to time again" in capsys.readouterr().out


def test_each_tuner_tuned_cold_is_set_against_itself_tuned_hot():
    # the --cold part's timing of the six networks: bo faster tuned cold on both seeds,
    # ms-default slower on one
    bench = network_tuning()
    cells = [pair("cnn", 0, 16, {"bo": 90, "bo@hot": 100, "ms-default": 110,
                                 "ms-default@hot": 100}),
             pair("cnn", 1, 16, {"bo": 80, "bo@hot": 100, "ms-default": 100,
                                 "ms-default@hot": 100})]
    rows = bench.summarize_hot_vs_cold(cells, ["bo", "ms-xgb-pretrained", "ms-default"])
    assert [(r["tuner"], r["per_task"]) for r in rows] == [("bo", 16), ("ms-default", 16)]
    assert rows[0]["ratios"] == pytest.approx([0.9, 0.8])
    assert rows[0]["geomean_ratio"] == pytest.approx(math.sqrt(0.72))
    assert rows[1]["geomean_ratio"] == pytest.approx(math.sqrt(1.1))
    text = bench.format_summary({"networks": {}, "paired": [], "hot_vs_cold": rows})
    assert "bo tuned cold / tuned hot at 16 trials per task: network latency ratio 0.849 " \
        "(cnn seed 0 0.900, cnn seed 1 0.800)" in text


def test_the_hot_and_cold_networks_are_not_timed_while_a_hot_run_is_missing(tmp_path):
    from datagen.grid import Grid

    bench = network_tuning()
    cold, hot = Grid(str(tmp_path / "cold")), Grid(str(tmp_path / "hot"))
    for grid in (cold, hot):
        grid.write(os.path.join("runs", "cnn", "bo", "seed0-b16", "done.json"), {"budget": 80})
    cold.write(os.path.join("runs", "cnn", "ms-default", "seed0-b16", "done.json"),
               {"budget": 80})
    # ms-default's hot run is not on disk: nothing is compiled or timed, nothing written
    assert bench.run_hot_vs_cold("cnn", 0, 16, ["bo", "ms-default"], cold, hot, None, None,
                                 rounds=3) is None
    assert not os.path.exists(cold.path(bench.hot_vs_cold_cell("cnn", 0, 16)))


def test_the_reach_counts_only_the_seeds_that_ran_at_every_budget():
    # a third seed at 16 alone: the latencies at 16 take it in, the reach leaves it out
    pairs = PAIRS + [pair("cnn", 2, 16, {"bo": 200, "ms-default": 50})]
    rows = network_tuning().summarize(pairs, ["bo", "ms-default"])["networks"]["cnn"]
    bo, ref = rows["bo"], rows["ms-default"]
    assert bo["latency_us@16"] == pytest.approx(108) and ref["latency_us@16"] == pytest.approx(100)
    # over seeds 0 and 1: bo 99 and ms-default 110 at 16, against ms-default's 100 at 64
    assert bo["reaches_reference_at"] == 16 and ref["reaches_reference_at"] == 64
    assert bo["reach_seeds"] == ref["reach_seeds"] == [0, 1]


def test_two_of_ours_are_each_paired_with_the_baselines_and_once_with_each_other():
    # a variant of bo beside it (an ablation): bo-learn against bo and ms-default, bo against
    # ms-default alone (bo / bo-learn would be the same comparison again)
    bench = network_tuning()
    pairs = [pair("cnn", s, 64, {"bo": 80 + s, "bo-learn": 72, "ms-default": 90})
             for s in (0, 1)]
    summary = bench.summarize(pairs, ["bo", "bo-learn", "ms-default"], ["bo-learn", "bo"])
    assert [(p["ours"], p["baseline"]) for p in summary["paired"]] == [
        ("bo-learn", "bo"), ("bo-learn", "ms-default"), ("bo", "ms-default")]
    assert summary["paired"][0]["ratios"] == pytest.approx([72 / 80, 72 / 81])
    rows = summary["networks"]["cnn"]
    assert rows["ms-default"]["bo-learn_ratio@64"] == pytest.approx(0.8)
    assert rows["bo"]["bo-learn_ratio@64"] == pytest.approx(72 / math.sqrt(80 * 81))
    assert "bo_ratio@64" in rows["ms-default"] and "bo_ratio@64" not in rows["bo-learn"]
    assert "bo-learn / bo at 64 trials per task" in bench.format_summary(summary)


def test_a_report_reads_the_finished_pairs_and_tunes_nothing(tmp_path):
    from tuning.runs import write_json

    args = ["--parts", "networks", "--report", "--network-tuners", "bo", "ms-default",
            "--out", str(tmp_path)]
    empty = run_bench("tuning_vs_metaschedule.py", *args)
    assert empty.returncode != 0 and "no finished (network, seed, budget)" in empty.stderr
    for p in PAIRS:
        write_json(str(tmp_path / "tuning-networks" / "pairs" /
                       f"{p['network']}__seed{p['seed']}__b{p['per_task']}.json.xz"), p)
    proc = run_bench("tuning_vs_metaschedule.py", *args)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bo / ms-default at 64 trials per task: ratio 0.748" in proc.stdout
    summary = json.loads((tmp_path / "tuning-networks" / "summary.json").read_text())
    assert list(summary["networks"]) == ["cnn"]
    assert sorted(os.listdir(tmp_path / "tuning-networks")) == ["pairs", "summary.json"]


def race(network, seed, latency_us):
    """A finished race of bo at 64 against ms-default at 256 trials per task, as
    `network_tuning.run_reach` writes it: 3 rounds."""
    cell = pair(network, seed, 64, latency_us)
    return {**cell, "reference_per_task": 256}


RACES = [race("cnn", 0, {"bo": 95, "ms-default@256": 100}),
         race("cnn", 1, {"bo": 99, "ms-default@256": 100}),
         race("vit", 0, {"bo": 110, "ms-default@256": 100})]


def test_the_race_to_the_reference_at_its_larger_budget():
    bench = network_tuning()
    cnn, vit = bench.summarize_reach(RACES)
    assert (cnn["network"], cnn["ours"], cnn["per_task"], cnn["reference_per_task"]) == \
        ("cnn", "bo", 64, 256)
    assert cnn["seeds"] == [0, 1] and cnn["ratios"] == pytest.approx([0.95, 0.99])
    assert cnn["geomean_ratio"] == pytest.approx(math.sqrt(0.95 * 0.99)) and cnn["reached"]
    assert vit["ratios"] == pytest.approx([1.1]) and not vit["reached"]
    text = bench.format_summary({"networks": {}, "paired": [], "reach": [cnn, vit]})
    assert "cnn: bo at 64 trials per task / ms-default at 256: ratio 0.970" in text
    assert "seed 0 0.950, seed 1 0.990): reached" in text
    assert "vit: bo at 64 trials per task / ms-default at 256: ratio 1.100 (seed 0 1.100): " \
        "not reached (10.0% slower)" in text


def test_a_report_reads_the_races_beside_the_pairs(tmp_path):
    from tuning.runs import write_json

    folder = tmp_path / "tuning-networks"
    for c in RACES:
        write_json(str(folder / "reach" / f"{c['network']}__seed{c['seed']}__b64-vs-b256.json.xz"),
                   c)
    args = ["--parts", "networks", "--report", "--out", str(tmp_path)]
    proc = run_bench("tuning_vs_metaschedule.py", *args)  # the races alone, no pair yet
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "cnn: bo at 64 trials per task / ms-default at 256: ratio 0.970" in proc.stdout
    summary = json.loads((folder / "summary.json").read_text())
    assert summary["networks"] == {} and [r["network"] for r in summary["reach"]] == ["cnn", "vit"]
    for p in PAIRS:
        write_json(str(folder / "pairs" /
                       f"{p['network']}__seed{p['seed']}__b{p['per_task']}.json.xz"), p)
    proc = run_bench("tuning_vs_metaschedule.py", *args, "--network-tuners", "bo", "ms-default")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "bo / ms-default at 64 trials per task: ratio 0.748" in proc.stdout
    assert "vit: bo at 64 trials per task / ms-default at 256" in proc.stdout
    summary = json.loads((folder / "summary.json").read_text())
    assert list(summary["networks"]) == ["cnn"] and len(summary["reach"]) == 2


@pytest.mark.parametrize("extra, message", [
    (["--networks", "resnet5"], "unknown network(s) resnet5; see 'datagen networks'"),
    (["--network-budgets", "0"], "--network-budgets are trials per task, at least one round"),
    (["--network-budgets", "4", "16"], "at least one round of 8, not 4: a smaller budget leaves"),
    (["--rounds", "0"], "--rounds must be at least 1, not 0"),
    (["--network-budgets", "16", "64", "--network-reach", "64"],
     "--network-reach is ms-default's budget for ours to reach, above the largest "
     "--network-budgets (64), not 64"),
    (["--parts", "shapes", "networks", "--cold"], "--cold is for --parts networks alone"),
])
def test_bad_input_of_the_networks_part_is_one_line(tmp_path, extra, message):
    proc = run_bench("tuning_vs_metaschedule.py", "--parts", "networks", "--out", str(tmp_path),
                     *extra)
    assert proc.returncode != 0 and message in proc.stderr and "Traceback" not in proc.stderr
    assert os.listdir(tmp_path) == []


def test_a_damaged_pair_is_one_line(tmp_path):
    """A pair file cut short (not as `run_pair` writes one: whole) names itself and what to do."""
    folder = tmp_path / "tuning-networks" / "pairs"
    folder.mkdir(parents=True)
    (folder / "cnn__seed0__b16.json.xz").write_bytes(b"\xfd7zXZ\x00")
    proc = run_bench("tuning_vs_metaschedule.py", "--parts", "networks", "--report",
                     "--out", str(tmp_path))
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1, proc.stderr
    assert "cnn__seed0__b16.json.xz is damaged" in lines[0] and "delete it" in lines[0]
