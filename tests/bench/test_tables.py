"""bench/tables.py: a marked table of a README written from its result file, --check's report
of a table that differs, and bad input as one line. Every file here is made by the test (no
figure of bench/results is read)."""

import json
import os
import shutil
import subprocess
import sys

from conftest import BENCH_DIR, CLI_TIMEOUT_SEC, assert_clean_error, run_bench

REPORT = {"models": {
    "graphsage": {"runs": 3, "mean": {"kendall_tau": 0.61234, "top1_score": 0.5, "mape": 51.26},
                  "std": {"kendall_tau": 0.01, "top1_score": 0.1, "mape": 2.0}},
    "xgb": {"runs": 1, "mean": {"kendall_tau": 0.4, "top1_score": 0.7, "mape": None},
            "std": {"kendall_tau": 0.0, "top1_score": 0.0, "mape": None}}}}
MARKER = ('<!-- table: report results/report.json head="model | tau | top-1 | MAPE"\n'
          '    cols=tau,top1,mape:0% bold=1 row="graphsage ours" row="xgb theirs" -->')
TABLE = ["| model | tau | top-1 | MAPE |",
         "| --- | --- | --- | --- |",
         "| ours | **0.612 ± 0.010** | 0.500 ± 0.100 | 51% ± 2% |",
         "| theirs | 0.400 | 0.700 | n/a |"]


def readme(tmp_path, marker: str = MARKER):
    """A README with one marked table (stale: not what its file gives) between prose, and the
    report it names; its path."""
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / "report.json").write_text(json.dumps(REPORT))
    path = tmp_path / "README.md"
    path.write_text(f"# Results\n\nbefore\n\n{marker}\n| stale |\n<!-- end table -->\n\nafter\n")
    return path


def write_result(tmp_path, name: str, data) -> None:
    """A results file the marked tables read (results/NAME, JSON)."""
    (tmp_path / "results").mkdir(exist_ok=True)
    (tmp_path / "results" / name).write_text(json.dumps(data))


def tables(path, *args: str):
    return run_bench("tables.py", "--readme", str(path), *args)


def test_a_marked_table_is_written_from_its_file(tmp_path):
    path = readme(tmp_path)
    proc = tables(path)
    assert proc.returncode == 0, proc.stderr
    assert path.read_text() == ("# Results\n\nbefore\n\n" + MARKER + "\n" + "\n".join(TABLE)
                                + "\n<!-- end table -->\n\nafter\n")
    again = tables(path)  # nothing left to rewrite
    assert again.returncode == 0 and "0 rewritten" in again.stdout


def test_a_result_file_kept_xz_compressed_is_read_with_the_standard_library_alone(tmp_path):
    """CI checks the tables before it installs anything: the script runs here with no
    site-packages and no project package on its path (-I -S), on an xz-compressed file and
    then on a damaged one (one line, exit 2)."""
    import lzma

    path = readme(tmp_path, MARKER.replace("report.json", "report.json.xz"))
    plain = tmp_path / "results" / "report.json"
    with lzma.open(str(plain) + ".xz", "wt") as f:
        f.write(plain.read_text())
    plain.unlink()

    def isolated(*args):
        return subprocess.run([sys.executable, "-I", "-S", os.path.join(BENCH_DIR, "tables.py"),
                               "--readme", str(path), *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_SEC)

    proc = isolated()
    assert proc.returncode == 0, proc.stderr
    assert "\n".join(TABLE) in path.read_text()
    (tmp_path / "results" / "report.json.xz").write_bytes(b"\xfd7zXZ\x00 not xz")
    proc = isolated("--check")
    assert_clean_error(proc, "cannot be read", prog="tables")


def test_check_names_a_table_that_differs_and_writes_nothing(tmp_path):
    path = readme(tmp_path)
    stale = path.read_text()
    proc = tables(path, "--check")
    assert proc.returncode == 1
    lines = proc.stdout.splitlines()
    assert len(lines) == 1 and "line 5" in lines[0] and "results/report.json" in lines[0]
    assert path.read_text() == stale
    assert tables(path).returncode == 0
    proc = tables(path, "--check")
    assert (proc.returncode, proc.stdout) == (0, "")
    drifted = json.loads(json.dumps(REPORT))
    drifted["models"]["xgb"]["mean"]["kendall_tau"] = 0.45  # the file moved on
    (tmp_path / "results" / "report.json").write_text(json.dumps(drifted))
    assert tables(path, "--check").returncode == 1


def test_a_missing_file_is_one_line(tmp_path):
    path = readme(tmp_path)
    (tmp_path / "results" / "report.json").unlink()
    before = path.read_text()
    for args in ((), ("--check",)):
        proc = tables(path, *args)
        assert_clean_error(proc, "results/report.json cannot be read", prog="tables")
    assert path.read_text() == before


def test_an_unknown_kind_or_figure_is_one_line(tmp_path):
    proc = tables(readme(tmp_path, MARKER.replace("table: report", "table: nosuch")), "--check")
    assert_clean_error(proc, "unknown kind 'nosuch'", prog="tables")
    proc = tables(readme(tmp_path, MARKER.replace('row="xgb', 'row="mlp')), "--check")
    assert_clean_error(proc, "has no figure 'tau' of 'mlp'", prog="tables")
    (tmp_path / "results" / "broken.json").write_text("{not json")
    proc = tables(readme(tmp_path, MARKER.replace("report.json", "broken.json")))
    assert_clean_error(proc, "results/broken.json cannot be read", prog="tables")


def test_a_tuning_table_shows_each_tuners_wall_time_per_trial(tmp_path):
    summary = {"budgets": [8], "workloads": {}, "paired": [],
               "geomean": {"bo": {"remeasured@8": 1e-4, "s_per_trial": 1.234},
                           "ms-default": {"remeasured@8": 2e-4}}}
    write_result(tmp_path, "summary.json", summary)
    marker = ('<!-- table: tuning results/summary.json head="tuner | us | s/trial"\n'
              '    cols=@8,wall row="geomean#bo bo" -->')
    path = readme(tmp_path, marker)
    assert tables(path).returncode == 0
    assert "| bo | 100.0 | 1.23 |" in path.read_text()
    proc = tables(readme(tmp_path, marker.replace("geomean#bo bo", "geomean#ms-default ms")))
    assert_clean_error(proc, "geomean#ms-default recorded no wall time", prog="tables")


def test_a_row_takes_each_column_from_its_own_file(tmp_path):
    """row="SEL,SEL,..." gives one SELECTOR per figure column, each of any PATH (another kind's
    too), and - a cell with no figure; a row of - alone is a row of such cells."""
    transfer = {"curves": {"scratch": {"0.05": {
        "train_records": 10, "kendall_tau": {"mean": 0.5, "std": 0.02, "n": 3},
        "top1_score": {"mean": 0.25, "std": 0.0, "n": 1}}}}}
    write_result(tmp_path, "transfer.json", transfer)
    marker = ('<!-- table: transfer results/transfer.json report:results/report.json\n'
              '    head="records | tau | top-1" cols=tau,top1 none=- bold=2.1\n'
              '    row="scratch@0.05 10" row="2:graphsage,- all" row="- *earlier:*" -->')
    path = readme(tmp_path, marker)  # writes results/report.json too
    proc = tables(path)
    assert proc.returncode == 0, proc.stderr
    assert ("| records | tau | top-1 |\n| --- | --- | --- |\n| 10 | 0.500 ± 0.020 | 0.250 |\n"
            "| all | **0.612 ± 0.010** | - |\n| *earlier:* | - | - |\n") in path.read_text()
    proc = tables(readme(tmp_path, marker.replace("2:graphsage,-", "2:graphsage,-,-")))
    assert_clean_error(proc, "has 3 SELECTORs, not one nor one per column (2)", prog="tables")


def test_a_report_row_of_one_workload(tmp_path):
    """MODEL[.N]@KEY: a run's figures of one workload (or family, or network)."""
    per_run = {"overall": {"kendall_tau": 0.6, "top1_score": 0.5},
               "per_workload": {"dense/m1_n2_k3": {"kendall_tau": 0.456, "top1_score": 0.88}},
               "per_family": {"dense": {"kendall_tau": 0.3, "top1_score": 0.4}}}
    report = {"models": {
        "graphsage": {"runs": 1, "mean": {}, "std": {}, "per_run": [per_run]},
        "xgb": {"runs": 2, "mean": {}, "std": {}, "per_run": [per_run, per_run]}}}
    write_result(tmp_path, "eval.json", report)
    marker = ('<!-- table: report results/eval.json head="workload | top-1 / tau | tau"\n'
              '    cols=top1:2+tau:2,tau row="graphsage@dense/m1_n2_k3,xgb.1@dense a dense"\n'
              '    bold=1.1.1 -->')
    path = readme(tmp_path, marker)
    assert tables(path).returncode == 0
    assert "| a dense | **0.88** / 0.46 | 0.300 |" in path.read_text()
    proc = tables(readme(tmp_path, marker.replace("xgb.1@", "xgb@")))
    assert_clean_error(proc, "'xgb' has 2 runs: name one, as in xgb.0@dense", prog="tables")
    proc = tables(readme(tmp_path, marker.replace("xgb.1@dense", "xgb.1@conv2d")))
    assert_clean_error(proc, "has no figure 'tau' of 'xgb.1@conv2d'", prog="tables")


def test_an_ablation_row_of_one_family(tmp_path):
    """SELECTOR@KEY of an ablation: a variant's (of one seed), its blend's or a baseline's
    figures of one held-out family."""
    family = {"lu": {"kendall_tau": 0.146, "top1_score": 0.785}}
    run = {"variant": "v3", "seed": 0, "overall": {}, "per_family": family}
    summary = {"variants": {"v3": {"hybrid": {"overall": {}, "per_family": {
        "lu": {"kendall_tau": 0.171, "top1_score": 0.782}}}}},
        "runs": [run, dict(run, seed=1)],
        "baselines": {"xgb": {"overall": {}, "per_family": {
            "lu": {"kendall_tau": 0.029, "top1_score": 0.597}}}}}
    write_result(tmp_path, "summary.json", summary)
    marker = ('<!-- table: ablation results/summary.json head="LU | tau | top-1"\n'
              '    cols=tau,top1 bold=1 row="v3.0@lu ours" row="v3.hybrid@lu blended"\n'
              '    row="xgb@lu theirs" -->')
    path = readme(tmp_path, marker)
    proc = tables(path)
    assert proc.returncode == 0, proc.stderr
    assert ("| ours | 0.146 | 0.785 |\n| blended | **0.171** | 0.782 |\n"
            "| theirs | 0.029 | 0.597 |\n") in path.read_text()
    proc = tables(readme(tmp_path, marker.replace("v3.0@lu", "v3@lu")))
    assert_clean_error(proc, "'v3' ran 2 seeds: name one, as in v3.0@lu", prog="tables")
    proc = tables(readme(tmp_path, marker.replace("xgb@lu", "xgb@3mm")))
    assert_clean_error(proc, "has no figure 'tau' of 'xgb@3mm'", prog="tables")


def test_a_latency_table_shows_the_median_and_each_seed(tmp_path):
    summary = {"trials": 96, "seeds": [0, 1, 2],
               "latency_us": {"untuned": [5000.04], "bo": [150.0, 110.25, 160.0]}}
    write_result(tmp_path, "summary.json", summary)
    marker = ('<!-- table: latency results/summary.json head="build | median (us) | per seed"\n'
              '    cols=median,seeds none= bold=1 row="untuned untuned" row="bo bo" -->')
    path = readme(tmp_path, marker)
    assert tables(path).returncode == 0
    text = path.read_text()
    assert "| untuned | **5000.0** |  |" in text and "| bo | 150.0 | 150.0, 110.2, 160.0 |" in text
    proc = tables(readme(tmp_path, marker.replace("cols=median,", "cols=mean,")))
    assert_clean_error(proc, "unknown latency field 'mean'", prog="tables")


def test_a_tuning_row_of_a_workload_whose_key_has_a_slash(tmp_path):
    """WORKLOAD#TUNER of a workload key such as dense/m1 is a tuner's row, not a comparison."""
    tuners = {"bo": {"best@8": 2e-5, "remeasured@8": 2.1e-5, "to_reach": 3.0},
              "ms-default": {"best@8": 4e-5, "remeasured@8": 4.2e-5, "to_reach": 8.0}}
    summary = {"budgets": [8], "workloads": {"dense/m1": tuners}, "geomean": tuners,
               "paired": []}
    write_result(tmp_path, "summary.json", summary)
    marker = ('<!-- table: tuning results/summary.json head="tuner | best@8 | us | reach"\n'
              '    cols=inrun@8,@8,reach row="dense/m1#bo bo" row="dense/m1#ms-default ms" -->')
    path = readme(tmp_path, marker)
    proc = tables(path)
    assert proc.returncode == 0, proc.stderr
    assert "| bo | 20.0 | 21.0 | 3 |\n| ms | 40.0 | 42.0 | 8 |" in path.read_text()


def test_both_readmes_by_default_each_path_relative_to_its_own_folder(tmp_path):
    """Without --readme the script writes and checks bench/README.md and the README of the
    folder above (a copy of the script in tmp_path/bench, so both are tmp_path's); a PATH is
    relative to its own README's folder."""
    bench = tmp_path / "bench"
    bench.mkdir()
    shutil.copy(os.path.join(BENCH_DIR, "tables.py"), bench)
    inner = readme(bench)  # bench/README.md, its PATH results/report.json under bench/
    outer = tmp_path / "README.md"
    outer.write_text("# Project\n\n" + MARKER.replace("results/", "bench/results/")
                     + "\n| stale |\n<!-- end table -->\n\nmore\n")

    def tables_here(*args):
        return subprocess.run([sys.executable, str(bench / "tables.py"), *args], cwd=tmp_path,
                              capture_output=True, text=True, timeout=CLI_TIMEOUT_SEC)

    proc = tables_here("--check")
    assert proc.returncode == 1, proc.stderr
    lines = proc.stdout.splitlines()
    assert len(lines) == 2, proc.stdout
    assert lines[0].startswith(os.path.join("bench", "README.md") + ": line 5: table report")
    assert lines[1].startswith("README.md: line 3: table report bench/results/report.json")
    proc = tables_here()
    assert proc.returncode == 0, proc.stderr
    assert "1 tables in README.md, 1 rewritten" in proc.stdout
    for path in (inner, outer):
        assert "\n".join(TABLE) + "\n<!-- end table -->" in path.read_text()
    assert outer.read_text().endswith("<!-- end table -->\n\nmore\n")
    proc = tables_here("--check")
    assert (proc.returncode, proc.stdout) == (0, "")
    # a PATH of the main README is not read relative to bench/
    outer.write_text(outer.read_text().replace("bench/results/", "results/"))
    proc = tables_here("--check")
    assert_clean_error(proc, "README.md: line 3: table report results/report.json: "
                       "results/report.json cannot be read", prog="tables")


def test_a_value_file_and_a_cell_of_other_fields(tmp_path):
    """value: figures at fixed keys of any JSON file (a key with a dot matched whole); a
    SELECTOR=FIELD+FIELD cell shows other FIELDs than its column's."""
    result = {"ratio": 1.9517, "median": {"ours_per_min": 58.0, "theirs_per_min": 29.71},
              "test": {"0.3": {"kendall_tau": 0.4271, "top1_score": 0.6641}}}
    write_result(tmp_path, "result.json", result)
    marker = ('<!-- table: value results/result.json report:results/report.json\n'
              '    head="what | figures" cols=tau+top1 none=-\n'
              '    row="test.0.3 blend at 0.3" row="2:graphsage ours"\n'
              '    row=".=ratio:2+median.ours_per_min:1 a ratio and a rate" -->')
    path = readme(tmp_path, marker)
    proc = tables(path)
    assert proc.returncode == 0, proc.stderr
    assert ("| blend at 0.3 | 0.427 / 0.664 |\n| ours | 0.612 ± 0.010 / 0.500 ± 0.100 |\n"
            "| a ratio and a rate | 1.95 / 58.0 |\n") in path.read_text()
    proc = tables(readme(tmp_path, marker.replace("test.0.3", "test.0.4")))
    assert_clean_error(proc, "has no figure 'tau' of 'test.0.4'", prog="tables")
    proc = tables(readme(tmp_path, marker.replace("median.ours", "median.nosuch")))
    assert_clean_error(proc, "has no figure 'median.nosuch_per_min' of '.'", prog="tables")


def test_a_value_row_picks_a_list_entry_by_its_keys(tmp_path):
    """value: paired.K:V&K:V picks the one entry of a list whose keys hold those values, so a
    table's rows do not hang on the entries' order; none or several matching is one line."""
    result = {"paired": [{"baseline": "xgb", "per_task": 16, "ratio": 0.9},
                         {"baseline": "xgb", "per_task": 64, "ratio": 1.04},
                         {"baseline": "default", "per_task": 64, "ratio": 0.95}]}
    write_result(tmp_path, "result.json", result)
    marker = ('<!-- table: value results/result.json head="pair | ratio" cols=ratio\n'
              '    row="paired.baseline:xgb&per_task:64 ours / xgb at 64"\n'
              '    row="paired.per_task:64&baseline:default ours / default at 64" -->')
    path = readme(tmp_path, marker)
    proc = tables(path)
    assert proc.returncode == 0, proc.stderr
    assert "| ours / xgb at 64 | 1.040 |\n| ours / default at 64 | 0.950 |\n" in path.read_text()
    proc = tables(readme(tmp_path, marker.replace("per_task:64&baseline", "per_task:32&baseline")))
    assert_clean_error(proc, "0 entries match 'per_task:32&baseline:default', not one",
                       prog="tables")
    proc = tables(readme(tmp_path, marker.replace("baseline:xgb&per_task:64", "baseline:xgb")))
    assert_clean_error(proc, "2 entries match 'baseline:xgb', not one", prog="tables")
