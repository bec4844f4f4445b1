"""datagen.grid: a benchmark's cells written whole, read back, and refused when made with other
settings."""

import json
import lzma
import os

import pytest

from datagen.errors import UserError
from datagen.grid import Grid, portable, read_json, write_json


def test_the_settings_are_written_once_and_others_refused(tmp_path):
    Grid(str(tmp_path), {"epochs": 3, "families": ("dense", "conv2d")})
    written = json.loads((tmp_path / "settings.json").read_text())
    assert written == {"epochs": 3, "families": ["dense", "conv2d"]}
    Grid(str(tmp_path), {"families": ["dense", "conv2d"], "epochs": 3})  # the same: resumes
    with pytest.raises(UserError, match=r"settings.json was made with other settings "
                                        r"\(epochs, seed\); use another --out"):
        Grid(str(tmp_path), {"epochs": 4, "families": ["dense", "conv2d"], "seed": 0})
    assert json.loads((tmp_path / "settings.json").read_text()) == written  # as it was
    Grid(str(tmp_path / "other"))  # no settings: nothing written
    assert not (tmp_path / "other").exists()


def test_a_finished_cell_is_read_back_and_one_of_other_settings_refused(tmp_path):
    grid = Grid(str(tmp_path))
    assert grid.read("runs/a/result.json") is None  # not finished
    cell = {"settings": {"variant": "base"}, "tau": 0.5}
    assert grid.write("runs/a/result.json", cell) is cell
    assert grid.read("runs/a/result.json", {"variant": "base"}) == cell
    assert grid.read("runs/a/result.json") == cell  # whatever it was made with
    with pytest.raises(UserError, match=r"result.json was made with other settings "
                                        r"\(variant\); use another --out, or delete it"):
        grid.read("runs/a/result.json", {"variant": "listmle"})
    assert os.listdir(tmp_path / "runs" / "a") == ["result.json"]  # no temporary file left
    # a setting recorded since a later version: a cell made before is not compared on it,
    # one made with it is
    assert grid.read("runs/a/result.json", {"variant": "base", "records": 9},
                     added=("records",)) == cell
    with pytest.raises(UserError, match=r"\(variant\)"):
        grid.read("runs/a/result.json", {"variant": "listmle", "records": 9}, added=("records",))
    grid.write("runs/b/result.json", {"settings": {"variant": "base", "records": 9}})
    with pytest.raises(UserError, match=r"result.json was made with other settings \(records\)"):
        grid.read("runs/b/result.json", {"variant": "base", "records": 10}, added=("records",))


def test_a_damaged_cell_is_one_clear_error(tmp_path):
    grid = Grid(str(tmp_path))
    (tmp_path / "cut.json").write_text('{"tau": 0.')
    with pytest.raises(UserError, match=r"cut.json is damaged \(.*\); delete it and run again"):
        grid.read("cut.json")
    (tmp_path / "cut.json.xz").write_bytes(b"not xz")
    with pytest.raises(UserError, match="cut.json.xz is damaged"):
        grid.read("cut.json.xz")


def test_an_xz_cell_is_compressed_and_a_plain_one_read_in_its_place(tmp_path):
    grid = Grid(str(tmp_path))
    pair = {"latency": [1e-3] * 200}
    grid.write("pairs/p.json.xz", pair)
    path = tmp_path / "pairs" / "p.json.xz"
    assert path.read_bytes()[:6] == b"\xfd7zXZ\x00"  # the xz magic
    assert path.stat().st_size < len(json.dumps(pair)) and grid.read("pairs/p.json.xz") == pair
    write_json(str(tmp_path / "pairs" / "old.json"), {"plain": True})  # written before xz
    assert grid.read("pairs/old.json.xz") == {"plain": True}
    assert read_json(str(tmp_path / "pairs" / "old.json.xz")) == {"plain": True}


def test_cells_as_lines_are_added_whole_and_a_line_cut_short_is_left_out(tmp_path):
    grid = Grid(str(tmp_path))
    assert grid.lines("tasks.jsonl") == []
    grid.add_line("tasks.jsonl", {"key": "a", "here": [1.0, None]})
    grid.add_line("tasks.jsonl", {"key": "b", "here": [2.0]})
    assert [r["key"] for r in grid.lines("tasks.jsonl")] == ["a", "b"]
    path = tmp_path / "tasks.jsonl"
    path.write_text(path.read_text() + '{"key": "c", "he')  # appended by a run stopped there
    assert [r["key"] for r in grid.lines("tasks.jsonl")] == ["a", "b"]
    grid.add_line("tasks.jsonl", {"key": "d"})  # the cut line is gone, the new one whole
    assert path.read_text().splitlines()[-1] == '{"key": "d"}'
    assert [r["key"] for r in grid.lines("tasks.jsonl")] == ["a", "b", "d"]
    path.write_text('{"key": "a"}\n{"ke\n{"key": "b"}\n')  # damaged within: not a cut line
    with pytest.raises(UserError, match="tasks.jsonl: line 2 is damaged"):
        grid.lines("tasks.jsonl")


def test_lines_named_xz_are_compressed_and_read_a_plain_file_written_before(tmp_path):
    grid = Grid(str(tmp_path))
    (tmp_path / "old.jsonl").write_text('{"key": "a"}\n')  # a run before compression
    assert grid.lines("old.jsonl.xz") == [{"key": "a"}]
    grid.add_line("old.jsonl.xz", {"key": "b"})
    with lzma.open(tmp_path / "old.jsonl.xz", "rt") as f:
        assert f.read() == '{"key": "a"}\n{"key": "b"}\n'
    assert grid.lines("old.jsonl.xz") == [{"key": "a"}, {"key": "b"}]
    (tmp_path / "old.jsonl.xz").write_bytes(b"not xz")
    with pytest.raises(UserError, match="old.jsonl.xz is damaged"):
        grid.lines("old.jsonl.xz")


def test_a_path_inside_the_repository_is_recorded_relative_to_it(tmp_path):
    root = tmp_path / "repo"
    assert portable(str(root / "data" / "x"), str(root)) == os.path.join("data", "x")
    assert portable(str(tmp_path / "elsewhere"), str(root)) == str(tmp_path / "elsewhere")
    assert portable(str(tmp_path / "repo-copy"), str(root)) == str(tmp_path / "repo-copy")
