"""`costmodel report`: the readable report.md written again from a kept report.json(.xz)."""

import pathlib

import pytest

from conftest import assert_clean_error, run_cli

KEPT = pathlib.Path(__file__).parents[2] / "bench/results/cuda-h100/eval-seed0/report.json.xz"


def test_a_kept_report_renders_beside_it(tmp_path):
    from datagen.grid import read_json

    kept = tmp_path / "report.json.xz"
    kept.write_bytes(KEPT.read_bytes())
    proc = run_cli("report", str(kept), prog="costmodel", check=True)
    text = (tmp_path / "report.md").read_text()
    assert str(tmp_path / "report.md") in proc.stdout
    report = read_json(str(KEPT))
    assert text.startswith(f"# Cost-model evaluation: {report['split']} split")
    for name, model in report["models"].items():
        assert f"| {name} ({model['runs']} run(s)) |" in text
    # its plots are not kept beside it: named, not linked
    assert report["plots"] and all(f"`{plot}`" in text and f"]({plot})" not in text
                                   for plot in report["plots"])


@pytest.mark.parametrize("content, message", [
    (None, "cannot read"),
    ("{not json", "is not JSON"),
    ('{"models": {}}', "is not a report of `costmodel evaluate`"),
])
def test_bad_input_is_one_line_and_writes_nothing(tmp_path, content, message):
    path = tmp_path / "report.json"
    if content is not None:
        path.write_text(content)
    proc = run_cli("report", str(path), prog="costmodel")
    assert_clean_error(proc, message, prog="costmodel")
    assert not (tmp_path / "report.md").exists()
