"""The record schema and its durable, append-only storage as Parquet shards.

A dataset is a folder of shards named `shard-<writer>-<n>.parquet`. A shard is written to a
hidden temporary file, flushed to disk and renamed into place, so a reader sees a whole shard
or none of it, and a collection killed at any moment (SIGKILL included) loses nothing that was
committed. Only `*.parquet` files are data; leftovers of a killed writer (`.tmp-*`) are ignored
and cleaned up by the next writer. Shards are zstd-compressed, one per collection round. `datagen compact` rewrites a folder's
shards as one, sorted by workload, its float columns byte-stream-split and the label columns,
which its repeats determine, left out, and `trace_hash`, which its trace determines, too where
`compact_hash` gives every record's (about a tenth of the space); the compacted shard names the shards it replaced, so a compaction
stopped midway never shows a record twice. `SCHEMA_VERSION` is stored in every shard's metadata and
checked on read. Version 2 added `retry_latencies` and `device`; version-1 shards are read as well, with
those columns empty, so older datasets stay readable and comparable.

Read a dataset with `read_records(folder)` (a pandas DataFrame).

The label columns (`latency_median`, `latency_std`, `latency_cv`) describe `latencies`, or,
when a noisy candidate was measured twice, whichever of its two measurements spread less
(`datagen.measure.label_stats`). A compacted shard does not store them: `read_records`
computes them from its status and repeats (`pandas.read_parquet` of such a shard lacks them),
and `trace_hash` from `trace` where the shard leaves it out (layout 4).

Columns (one row per measured candidate):

| column | type | meaning |
| --- | --- | --- |
| workload_key | string | stable workload id, e.g. `dense/m128_n768_k768` |
| family | string | operator family (an imported task: its anchor operator's, `datagen.torch_import.task_family`; `imported` for an unknown database workload) |
| workload_params | string (JSON) | the family's shape parameters (a network task: every (network, input, weight) it occurs in) |
| workload_ir | string (JSON) | the IRModule, `tvm.ir.save_json`, to rebuild the PrimFunc |
| network | string | network the shape comes from (comma-separated: every network the task occurs in) |
| workload_weight | int32 | how often the workload occurs in that network |
| target | string (JSON) | the TVM target, with `mcpu` for llvm |
| target_kind | string | `llvm`, `cuda`, ... |
| cpu_model | string | host CPU model of the measuring machine (`rpc:KEY` when measured through RPC) |
| device | string (JSON) | the measuring device: kind and model, for GPUs also compute capability, the driver's CUDA version, the CUDA version TVM was built with and the kernel driver's version (schema 2); through RPC also the key, without the driver's versions |
| num_threads | int32 | runtime threads used for measurement (0: a batch measured with the runtime alone) |
| trace | string (JSON) | replayable MetaSchedule trace, postprocessing included |
| trace_hash | string | SHA-1 of `trace` with booleans as 0/1 (deduplication key) |
| origin | string | `random` (fresh design-space sample), `evolved` (a mutation) or `imported` (from a database) |
| parent_hash | string | trace hash of the parent of an evolved candidate |
| mutator | string | mutator that produced an evolved candidate |
| round | int32 | collection round of the workload that produced it |
| status | string | `ok`, `build_error`, `build_timeout`, `run_error`, `run_timeout` |
| error | string | error message when not ok |
| latencies | list<double> | every timed repeat, seconds |
| retry_latencies | list<double> | a noisy candidate's second measurement (schema 2; else empty) |
| latency_median | double | median of the repeats, seconds (NaN when not ok; MetaSchedule's failure value 1e10 s is never stored) |
| latency_std | double | standard deviation of the repeats |
| latency_cv | double | spread: std / mean (flag noisy measurements with this) |
| build_secs | double | time to build the candidate |
| run_secs | double | wall time of its measurement (load, warm-up, repeats) |
| protocol | string (JSON) | warm-up, repeat, number, min_repeat_ms |
| seed | int64 | collection seed |
| tvm_version, tvm_ffi_version, project_version | string | provenance |
| collected_at | timestamp (UTC) | when the round was written |
"""

from __future__ import annotations

import contextlib
import glob
import hashlib
import json
import os
import time
import uuid

import pyarrow as pa
import pyarrow.parquet as pq

from datagen.errors import UserError, output_folder

SCHEMA_VERSION = 2
READABLE_VERSIONS = (1, 2)
SCHEMA_KEY = b"tvm_costmodel.schema_version"
# a compacted shard lists the shards it replaces; readers skip those if they still exist
REPLACES_KEY = b"tvm_costmodel.replaces"
SHARD_PATTERN = "shard-*.parquet"
TMP_PREFIX = ".tmp-"
COMPRESSION = "zstd"
COMPACT_LEVEL = 19  # zstd level of compacted shards: written once, read often
# compacted shards store their float columns byte-stream-split (each byte plane of the values
# together, which zstd packs about a fifth smaller) and leave out the label columns (layout 3:
# an eighth of the space; readers compute them) and, where `compact_hash` of every trace is
# its record's hash, `trace_hash` (layout 4: a sixth less again); the layout is named in their
# metadata, so `compact` rewrites a lone shard of an older layout once and then leaves it alone
LAYOUT_KEY = b"tvm_costmodel.compact_layout"
COMPACT_LAYOUT = b"4"
# what a record's status and repeats determine (`label_stats`)
LABEL_COLUMNS = ("latency_median", "latency_std", "latency_cv")

SCHEMA = pa.schema([
    ("workload_key", pa.string()),
    ("family", pa.string()),
    ("workload_params", pa.string()),
    ("workload_ir", pa.string()),
    ("network", pa.string()),
    ("workload_weight", pa.int32()),
    ("target", pa.string()),
    ("target_kind", pa.string()),
    ("cpu_model", pa.string()),
    ("device", pa.string()),
    ("num_threads", pa.int32()),
    ("trace", pa.string()),
    ("trace_hash", pa.string()),
    ("origin", pa.string()),
    ("parent_hash", pa.string()),
    ("mutator", pa.string()),
    ("round", pa.int32()),
    ("status", pa.string()),
    ("error", pa.string()),
    ("latencies", pa.list_(pa.float64())),
    ("retry_latencies", pa.list_(pa.float64())),
    ("latency_median", pa.float64()),
    ("latency_std", pa.float64()),
    ("latency_cv", pa.float64()),
    ("build_secs", pa.float64()),
    ("run_secs", pa.float64()),
    ("protocol", pa.string()),
    ("seed", pa.int64()),
    ("tvm_version", pa.string()),
    ("tvm_ffi_version", pa.string()),
    ("project_version", pa.string()),
    ("collected_at", pa.timestamp("us", tz="UTC")),
], metadata={SCHEMA_KEY: str(SCHEMA_VERSION).encode()})


def compact_hash(trace: str) -> str:
    """`datagen.sampler.trace_hash` of a trace written as `datagen.sampler.trace_to_json`
    writes it, without parsing it: SHA-1 of its text with its booleans as 0/1. `compact`
    leaves a shard's `trace_hash` column out only where this gives every record's."""
    return hashlib.sha1(trace.replace("true", "1").replace("false", "0").encode()).hexdigest()


def _compact_hashes(table: pa.Table) -> list[str | None]:
    """`compact_hash` of each record's trace in `table` (None where it has none)."""
    return [t if t is None else compact_hash(t) for t in table["trace"].to_pylist()]


def check_folder(root: str) -> None:
    """Raise `UserError` unless the dataset folder `root` exists and is a folder."""
    if not os.path.isdir(root):
        raise UserError(f"dataset folder {root} " + ("is a file, not a folder"
                        if os.path.exists(root) else "does not exist"))


def _compact_options(schema: pa.Schema) -> dict:
    """`pq.write_table` options of a compacted shard: zstd at `COMPACT_LEVEL`, the float
    columns byte-stream-split (which parquet applies only where no dictionary is used)."""
    floats = [f.name for f in schema if pa.types.is_floating(f.type)]
    lists = [f.name for f in schema
             if pa.types.is_list(f.type) and pa.types.is_floating(f.type.value_type)]
    return {"compression_level": COMPACT_LEVEL,
            # a list's values are the leaf column NAME.list.element
            "use_byte_stream_split": floats + [f"{n}.list.element" for n in lists],
            "use_dictionary": [n for n in schema.names if n not in floats + lists]}


def shard_paths(root: str) -> list[str]:
    return sorted(glob.glob(os.path.join(root, SHARD_PATTERN)))


def _checked_schema(path: str) -> pa.Schema:
    """The schema of a shard, which must be readable and of this schema version."""
    try:
        schema = pq.read_schema(path)
    except Exception as err:  # noqa: BLE001  (pyarrow raises several kinds)
        raise UserError(f"{path} is not a readable record shard ({err}); move it aside "
                        "and run again") from None
    found = (schema.metadata or {}).get(SCHEMA_KEY)
    if found is None or int(found) not in READABLE_VERSIONS:
        raise UserError(f"{path} has record schema version "
                        f"{found.decode() if found else 'none'}, this version reads "
                        f"{', '.join(map(str, READABLE_VERSIONS))}: collect into a new folder "
                        "or convert the dataset")
    return schema


def _read_shard(path: str, schema: pa.Schema, columns: list[str]) -> pa.Table:
    """The `columns` of one shard; label columns it leaves out are computed from its status
    and repeats, `trace_hash` from `trace`, other columns its (older) schema lacks come back
    empty."""
    present = [c for c in columns if c in schema.names]
    labels = [c for c in columns if c in LABEL_COLUMNS and c not in schema.names]
    hashes = "trace_hash" in columns and "trace_hash" not in schema.names \
        and "trace" in schema.names
    sources = [c for c in ("status", "latencies", "retry_latencies")
               if labels and c in schema.names and c not in present]
    sources += ["trace"] if hashes and "trace" not in present else []
    table = pq.read_table(path, columns=present + sources).replace_schema_metadata(None)
    if labels:
        table = _with_labels(table, labels)
    if hashes:
        table = table.append_column(SCHEMA.field("trace_hash"),
                                    pa.array(_compact_hashes(table), pa.string()))
    for name in columns:
        if name not in table.column_names:
            field = SCHEMA.field(name)
            empty = [] if pa.types.is_list(field.type) else None
            table = table.append_column(field, pa.array([empty] * len(table), field.type))
    return table.select(columns)


def _with_labels(table: pa.Table, names: list[str]) -> pa.Table:
    """`table` with the label columns `names` computed from its status and repeats."""
    from datagen.measure import label_stats

    retry = table["retry_latencies"].to_pylist() if "retry_latencies" in table.column_names \
        else [None] * len(table)
    stats = [label_stats(s, lat, r) for s, lat, r in
             zip(table["status"].to_pylist(), table["latencies"].to_pylist(), retry)]
    for name in names:
        table = table.append_column(SCHEMA.field(name),
                                    pa.array([row[name] for row in stats], pa.float64()))
    return table


def _live_shards(root: str) -> tuple[dict[str, pa.Schema], list[str]]:
    """The shards that hold data, with their schemas, and the leftovers of a compaction that
    was stopped before it removed the shards it had replaced."""
    schemas = {path: _checked_schema(path) for path in shard_paths(root)}
    replaced = set()
    for schema in schemas.values():
        listed = (schema.metadata or {}).get(REPLACES_KEY)
        if listed:
            replaced.update(json.loads(listed))
    stale = [p for p in schemas if os.path.basename(p) in replaced]
    return {p: s for p, s in schemas.items() if p not in stale}, stale


def read_records(root: str, columns: list[str] | None = None):
    """All committed records of a dataset folder as a pandas DataFrame.

    Raises:
        UserError: the folder is missing, a shard is unreadable or of another schema version.
    """
    import pandas as pd

    check_folder(root)
    tables = []
    for path, schema in _live_shards(root)[0].items():
        try:
            tables.append(_read_shard(path, schema, columns or SCHEMA.names))
        except Exception as err:  # noqa: BLE001  (pyarrow raises several kinds)
            raise UserError(f"{path} is not a readable record shard ({err}); move it aside "
                            "and run again") from None
    if not tables:
        names = columns or SCHEMA.names
        return pd.DataFrame({n: pd.Series(dtype=object) for n in names})
    return pa.concat_tables(tables).to_pandas()


class ShardWriter:
    """Appends batches of records to a dataset folder, one atomic shard per batch.

    Holds an exclusive lock on the folder for its lifetime, so two collectors never write
    the same dataset.

    Args:
        root: the dataset folder (created if missing).
    """

    def __init__(self, root: str):
        import fcntl

        self.root = output_folder(root)
        try:
            self._lock = open(os.path.join(root, ".lock"), "a+")
        except OSError as err:
            raise UserError(f"cannot write to {root}: {err.strerror}") from None
        try:
            fcntl.flock(self._lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            raise UserError(f"{root} is being written by another collector; wait for it or "
                            "choose another --out") from None
        for stale in glob.glob(os.path.join(root, TMP_PREFIX + "*")):
            os.remove(stale)  # a killed writer's half-written shard: never data
        for stale in _live_shards(root)[1]:
            os.remove(stale)  # replaced by a compacted shard whose compaction was stopped
        self._writer_id = f"{int(time.time())}{uuid.uuid4().hex[:6]}"
        self._count = 0
        self.committed = 0  # records committed by this writer

    def write(self, rows: list[dict]) -> str:
        """Commit `rows` (dicts with the schema's columns) as one new shard; return its path."""
        return self._commit(pa.Table.from_pylist(rows, schema=SCHEMA))

    def compact(self) -> tuple[int, int, int]:
        """Rewrite every shard of the folder as one, sorted by workload and round, and remove
        the old ones: the same records in a fraction of the space (one copy of each workload's
        definition, traces compressed together). Safe to stop at any moment: the new shard
        lists the shards it replaces, so a reader never sees a record twice, and the next
        writer removes what is left. Returns (shards before, bytes before, bytes after)."""
        live = _live_shards(self.root)[0]
        if not live or (len(live) == 1 and (next(iter(live.values())).metadata or {})
                        .get(LAYOUT_KEY) == COMPACT_LAYOUT):
            size = sum(os.path.getsize(p) for p in live)
            return len(live), size, size
        before = sum(os.path.getsize(p) for p in live)
        stored = [n for n in SCHEMA.names if n not in LABEL_COLUMNS]
        table = pa.concat_tables([_read_shard(p, s, stored) for p, s in live.items()])
        table = table.sort_by([("workload_key", "ascending"), ("round", "ascending")])
        if _compact_hashes(table) == table["trace_hash"].to_pylist():  # else kept: another hash
            stored.remove("trace_hash")
            table = table.drop_columns(["trace_hash"])
        replaces = json.dumps(sorted(os.path.basename(p) for p in live)).encode()
        schema = pa.schema([SCHEMA.field(n) for n in stored])
        final = self._commit(table.cast(schema).replace_schema_metadata(
            {**SCHEMA.metadata, REPLACES_KEY: replaces, LAYOUT_KEY: COMPACT_LAYOUT}),
            compacted=True)
        for path in live:
            os.remove(path)
        return len(live), before, os.path.getsize(final)

    def _commit(self, table: pa.Table, compacted: bool = False) -> str:
        self._count += 1
        name = f"shard-{self._writer_id}-{self._count:05d}.parquet"
        final = os.path.join(self.root, name)
        tmp = os.path.join(self.root, TMP_PREFIX + name)
        try:
            with open(tmp, "wb") as handle:
                pq.write_table(table, handle, compression=COMPRESSION,
                               **(_compact_options(table.schema) if compacted else {}))
                handle.flush()
                os.fsync(handle.fileno())
            os.replace(tmp, final)
            dir_fd = os.open(self.root, os.O_RDONLY)
            try:
                os.fsync(dir_fd)  # make the rename itself durable
            finally:
                os.close(dir_fd)
        except OSError as err:  # a full disk, a folder made read-only
            with contextlib.suppress(OSError):
                os.remove(tmp)
            raise UserError(
                f"cannot write a shard to {self.root}: {err.strerror or err}; the "
                f"{self.committed} records this writer committed before, and every shard "
                f"before it, are kept, the {table.num_rows} of this shard are not; free space "
                "and run the same command again to go on from there") from None
        self.committed += table.num_rows
        return final

    def close(self) -> None:
        self._lock.close()

