"""bench/tables.py: a marked table of a README written from its result file, --check's report
of a table that differs, and bad input as one line. Every file here is made by the test (no
figure of bench/results is read)."""

import json

from conftest import assert_clean_error, run_bench

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
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "summary.json").write_text(json.dumps(summary))
    marker = ('<!-- table: tuning results/summary.json head="tuner | us | s/trial"\n'
              '    cols=@8,wall row="geomean#bo bo" -->')
    path = readme(tmp_path, marker)
    assert tables(path).returncode == 0
    assert "| bo | 100.0 | 1.23 |" in path.read_text()
    proc = tables(readme(tmp_path, marker.replace("geomean#bo bo", "geomean#ms-default ms")))
    assert_clean_error(proc, "geomean#ms-default recorded no wall time", prog="tables")
