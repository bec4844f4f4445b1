import glob
import os

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from datagen import records
from datagen.errors import UserError
from datagen.measure import label_stats


def _row(i: int, latencies=(1e-6, 2e-6), status="ok", retry=()) -> dict:
    row = {name: None for name in records.SCHEMA.names}
    row.update(workload_key="dense/m1_n1_k1", trace_hash=f"h{i}", status=status,
               latencies=list(latencies), retry_latencies=list(retry), round=0, seed=0,
               **label_stats(status, latencies, retry))
    return row


def test_write_then_read_round_trip(tmp_path):
    writer = records.ShardWriter(str(tmp_path))
    writer.write([_row(0), _row(1)])
    writer.write([_row(2)])
    writer.close()
    frame = records.read_records(str(tmp_path))
    assert list(frame.trace_hash) == ["h0", "h1", "h2"]
    assert list(frame.latencies[0]) == [1e-6, 2e-6]
    assert len(records.shard_paths(str(tmp_path))) == 2


def test_half_written_files_are_never_data(tmp_path):
    writer = records.ShardWriter(str(tmp_path))
    writer.write([_row(0)])
    writer.close()
    (tmp_path / ".tmp-shard-x-00001.parquet").write_bytes(b"PAR1 truncated")
    assert len(records.read_records(str(tmp_path))) == 1
    records.ShardWriter(str(tmp_path)).close()  # the next writer cleans the leftover up
    assert not list(tmp_path.glob(".tmp-*"))


def test_one_writer_per_folder(tmp_path):
    first = records.ShardWriter(str(tmp_path))
    with pytest.raises(UserError, match="another collector"):
        records.ShardWriter(str(tmp_path))
    first.close()


def test_other_schema_version_is_refused(tmp_path):
    table = pa.Table.from_pylist([_row(0)], schema=records.SCHEMA)
    table = table.replace_schema_metadata({records.SCHEMA_KEY: b"99"})
    pq.write_table(table, tmp_path / "shard-old-00001.parquet")
    with pytest.raises(UserError, match="schema version 99"):
        records.read_records(str(tmp_path))
    with pytest.raises(UserError, match="schema version 99"):
        records.ShardWriter(str(tmp_path))


def test_corrupt_shard_is_reported_not_deleted(tmp_path):
    bad = tmp_path / "shard-bad-00001.parquet"
    bad.write_bytes(b"not parquet")
    with pytest.raises(UserError, match="not a readable record shard"):
        records.read_records(str(tmp_path))
    assert bad.read_bytes() == b"not parquet"


def test_missing_folder(tmp_path):
    with pytest.raises(UserError, match="does not exist"):
        records.read_records(str(tmp_path / "nope"))


def test_unwritable_output(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("x")
    with pytest.raises(UserError, match="cannot write"):
        records.ShardWriter(os.path.join(str(blocker), "sub"))


def test_empty_dataset_has_columns(tmp_path):
    frame = records.read_records(str(tmp_path), columns=["workload_key"])
    assert list(frame.columns) == ["workload_key"] and len(frame) == 0


def test_version_1_shards_read_with_retry_latencies_empty(tmp_path):
    v1 = pa.schema([f for f in records.SCHEMA if f.name != "retry_latencies"],
                   metadata={records.SCHEMA_KEY: b"1"})
    row = {k: v for k, v in _row(0).items() if k != "retry_latencies"}
    pq.write_table(pa.Table.from_pylist([row], schema=v1), tmp_path / "shard-old-00001.parquet")
    writer = records.ShardWriter(str(tmp_path))  # a version-2 shard beside it
    writer.write([_row(1, retry=[3e-6, 3e-6])])
    writer.close()
    frame = records.read_records(str(tmp_path))
    assert list(frame.trace_hash) == ["h1", "h0"] or list(frame.trace_hash) == ["h0", "h1"]
    by_hash = frame.set_index("trace_hash")
    assert list(by_hash.loc["h0", "retry_latencies"]) == []
    assert list(by_hash.loc["h1", "retry_latencies"]) == [3e-6, 3e-6]
    assert list(records.read_records(str(tmp_path), ["trace_hash", "retry_latencies"]).columns) \
        == ["trace_hash", "retry_latencies"]


def test_committed_llvm_dataset_stays_readable():
    root = os.path.join(os.path.dirname(__file__), "..", "..", "data", "llvm-full")
    frame = records.read_records(root, ["workload_key", "latency_median", "retry_latencies"])
    # every committed record read once, whatever the dataset's size; written before retries
    # were recorded, so every one has none; a latency is positive or missing (a failed build)
    shards = glob.glob(os.path.join(root, "shard-*.parquet"))
    assert len(frame) == sum(pq.ParquetFile(p).metadata.num_rows for p in shards) > 0
    assert frame.retry_latencies.map(len).eq(0).all() and (frame.latency_median.dropna() > 0).all()


def test_compaction_keeps_every_record_once_even_when_stopped_midway(tmp_path):
    import shutil

    writer = records.ShardWriter(str(tmp_path))
    for i in range(5):
        writer.write([{**_row(2 * i), "round": 5 - i}, {**_row(2 * i + 1), "round": 5 - i}])
    writer.close()
    before = records.read_records(str(tmp_path)).sort_values("trace_hash")
    # a compaction stopped after its shard was committed, before the old ones were removed
    keep = tmp_path / "copy"
    shutil.copytree(tmp_path, keep)
    writer = records.ShardWriter(str(tmp_path))
    shards, _, _ = writer.compact()
    writer.close()
    assert shards == 5 and len(records.shard_paths(str(tmp_path))) == 1
    (compacted,) = records.shard_paths(str(tmp_path))
    shutil.copy(compacted, keep)
    assert len(records.shard_paths(str(keep))) == 6
    for folder in (tmp_path, keep):
        after = records.read_records(str(folder)).sort_values("trace_hash")
        assert len(after) == 10
        assert after.drop(columns="collected_at").reset_index(drop=True).equals(
            before.drop(columns="collected_at").reset_index(drop=True))
    records.ShardWriter(str(keep)).close()  # the next writer removes the replaced shards
    assert len(records.shard_paths(str(keep))) == 1


def test_a_lone_shard_of_the_older_layout_is_compacted_once(tmp_path):
    writer = records.ShardWriter(str(tmp_path))
    rows = [_row(i, [1e-6 * (i + 1), 1.1e-6 * (i + 1)]) for i in range(20)]
    rows[3] = _row(3, [1e-6, 3e-6], retry=[2e-6, 2.1e-6])  # its label: the retry, which spread less
    rows[4] = _row(4, [1e-6, 2e-6], retry=[1e-6, 9e-6])  # the first measurement
    rows[5] = _row(5, [], status="run_error")  # failed: NaN labels
    writer.write(rows)
    before = records.read_records(str(tmp_path)).sort_values("trace_hash")
    (plain,) = records.shard_paths(str(tmp_path))
    assert records.LAYOUT_KEY not in pq.read_schema(plain).metadata
    shards, _, _ = writer.compact()
    (compacted,) = records.shard_paths(str(tmp_path))
    assert shards == 1 and compacted != plain
    assert pq.read_schema(compacted).metadata[records.LAYOUT_KEY] == records.COMPACT_LAYOUT
    chunks = pq.ParquetFile(compacted).metadata.row_group(0)
    encodings = {chunks.column(i).path_in_schema: chunks.column(i).encodings
                 for i in range(chunks.num_columns)}
    assert "BYTE_STREAM_SPLIT" in encodings["latencies.list.element"]
    assert "BYTE_STREAM_SPLIT" in encodings["build_secs"]
    # the label columns are not stored: read back, they are computed from the repeats
    assert not set(records.LABEL_COLUMNS) & set(pq.read_schema(compacted).names)
    assert "BYTE_STREAM_SPLIT" not in encodings["workload_key"]
    after = records.read_records(str(tmp_path)).sort_values("trace_hash")
    assert after.drop(columns="collected_at").reset_index(drop=True).equals(
        before.drop(columns="collected_at").reset_index(drop=True))
    labels = after.set_index("trace_hash").latency_median
    assert labels["h3"] == pytest.approx(2.05e-6) and labels["h4"] == pytest.approx(1.5e-6)
    assert labels.isna()["h5"]
    assert list(records.read_records(str(tmp_path), ["latency_cv"]).columns) == ["latency_cv"]
    writer.compact()  # already of this layout: left as it is
    writer.close()
    assert records.shard_paths(str(tmp_path)) == [compacted]


def test_compaction_leaves_out_the_trace_hash_only_where_the_trace_gives_it(tmp_path):
    """A compacted shard of traces as `datagen` writes them drops `trace_hash` (the reader
    computes it: the same hashes); one record hashed otherwise keeps the column."""
    from datagen.sampler import trace_hash

    real = records.read_records(os.path.join(os.path.dirname(__file__), "..", "..", "data",
                                             "llvm-full"), ["trace", "trace_hash"])[:12]
    assert any("true" in t for t in real.trace)  # booleans, which the hash reads as 0/1
    odd = '[[["Annotate",[],["not true",1],[]]],[]]'  # "true" inside a string, not a boolean
    for name, traces in (("plain", list(real.trace)), ("odd", list(real.trace) + [odd])):
        folder = str(tmp_path / name)
        writer = records.ShardWriter(folder)
        writer.write([{**_row(i), "trace": t, "trace_hash": trace_hash(t)}
                      for i, t in enumerate(traces)])
        before = records.read_records(folder)
        writer.compact()
        writer.close()
        (compacted,) = records.shard_paths(folder)
        assert ("trace_hash" in pq.read_schema(compacted).names) == (name == "odd")
        after = records.read_records(folder)
        assert list(after.trace_hash) == list(before.trace_hash) == [trace_hash(t)
                                                                     for t in traces]
        assert list(records.read_records(folder, ["trace_hash"]).columns) == ["trace_hash"]
    assert list(real.trace_hash) == [trace_hash(t) for t in real.trace]


def test_stats_piped_into_a_reader_that_stops_early_ends_quietly():
    """`datagen stats DIR | head` is how people look at a large dataset: no traceback."""
    import subprocess
    import sys

    root = os.path.join(os.path.dirname(__file__), "..", "..", "data", "llvm-networks")  # 90 KB: more than a pipe holds
    code = "import sys; from datagen.cli import main; sys.exit(main(sys.argv[1:]))"
    proc = subprocess.Popen([sys.executable, "-c", code, "stats", root, "--by", "workload"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    first = proc.stdout.readline()
    proc.stdout.close()  # the reader goes away after one line, as `head -1` does
    err = proc.stderr.read().decode()
    proc.wait(timeout=120)
    assert first.startswith(b"dataset ") and "Traceback" not in err and "Broken" not in err, err


WRITE_UNTIL_FULL = """
import resource, signal, sys
from datagen import records
from datagen.errors import run_command

def row(i, text=""):
    r = {name: None for name in records.SCHEMA.names}
    r.update(workload_key="dense/m1_n1_k1", trace_hash=f"h{i}", status="ok", trace=text,
             latencies=[1e-6], latency_median=1e-6, round=0, seed=0)
    return r

def main():
    writer = records.ShardWriter(sys.argv[1])
    writer.write([row(0), row(1)])  # fits
    # from here on no file of this process may grow past 64 KiB: the write fails as on a
    # full disk (EFBIG instead of ENOSPC, the same path)
    signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
    resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, resource.RLIM_INFINITY))
    import random
    rng = random.Random(0)
    noise = "".join(rng.choice("abcdefgh") for _ in range(400_000))  # ~150 KB compressed
    writer.write([row(2, noise)])

sys.exit(run_command("datagen", main))
"""


def test_a_write_error_is_one_line_and_keeps_what_was_committed(tmp_path):
    """A shard that cannot be written (the disk is full) ends the command with one line that
    says what was kept and how to go on; the shard before it stays and nothing half-written
    is left."""
    import subprocess
    import sys

    proc = subprocess.run([sys.executable, "-c", WRITE_UNTIL_FULL, str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.strip().splitlines()
    assert line.startswith(f"datagen: error: cannot write a shard to {tmp_path}: File too large")
    assert "the 2 records this writer committed before" in line and "run the same command" in line
    assert list(records.read_records(str(tmp_path)).trace_hash) == ["h0", "h1"]
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".tmp")] == []


def test_stats_of_several_datasets_count_their_tasks_together(tmp_path):
    """One task under two keys (a generated shape and a network task of the same computation)
    is one distinct task; it counts as having 16 schedules only where one target measured
    16 of them."""
    import datetime

    import tvm

    from conftest import run_cli
    from datagen.workloads import Workload

    dense = tvm.ir.save_json(Workload("dense", (8, 8, 8)).mod)
    softmax = tvm.ir.save_json(Workload("softmax", (4, 8)).mod)
    now = datetime.datetime.now(datetime.timezone.utc)

    def rows(key, ir, target, n, status="ok", start=0):
        return [{**_row(start + i), "workload_key": key, "workload_ir": ir, "target": target,
                 "status": status, "family": key.split("/")[0], "target_kind": "llvm",
                 "cpu_model": "cpu", "protocol": "{}", "num_threads": 2, "origin": "random",
                 "latency_cv": 0.01, "retry_latencies": [], "collected_at": now}
                for i in range(n)]

    for name, target, batch in [
            ("a", '{"mcpu": "a"}', rows("dense/a", dense, '{"mcpu": "a"}', 16)
             + rows("dense/a", dense, '{"mcpu": "a"}', 1, "build_error", 16)),
            ("b", '{"mcpu": "b"}', rows("torch/dense_x", dense, '{"mcpu": "b"}', 10)
             + rows("softmax/s", softmax, '{"mcpu": "b"}', 3, start=10))]:
        writer = records.ShardWriter(str(tmp_path / name))
        writer.write(batch)
        writer.close()
    out = run_cli("stats", str(tmp_path / "a"), str(tmp_path / "b"), check=True).stdout
    assert out.count("dataset ") == 2 and "best_us" not in out  # no tables for several
    assert out.splitlines()[-1] == ("together: 30 records, 29 ok, of 2 targets; 2 distinct "
                                    "tasks (structural hash), 1 with at least 16 ok schedules "
                                    "on one target")
