"""`datagen stats`: counts, failures and latencies of a dataset, per family and per workload;
of several datasets (one per target), also what they hold together: records, and distinct tasks
by structural hash (a generated task and a network task of the same computation are one), with
how many of them have at least `ENOUGH` successful schedules on one target."""

from __future__ import annotations

import pandas as pd

from datagen.measure import OK
from datagen.records import read_records
from datagen.errors import UserError

ENOUGH = 16  # schedules of a task on one target that the cost model's data targets count
COLUMNS = ["workload_key", "family", "status", "origin", "latency_median", "latency_cv",
           "retry_latencies", "target_kind", "cpu_model", "device", "num_threads", "protocol",
           "collected_at"]


def summarise(frame: pd.DataFrame, by: str) -> pd.DataFrame:
    """One row per `by` value: records, ok, failures by kind, random/evolved, best and median.

    Latencies are in microseconds; `best_us` and `median_us` are over successful records.
    """
    ok = frame["status"] == OK
    lat_us = frame["latency_median"].where(ok) * 1e6
    grouped = frame.assign(ok=ok, failed=~ok, lat_us=lat_us,
                           random=frame["origin"] == "random",
                           evolved=frame["origin"] == "evolved").groupby(by)
    table = pd.DataFrame({
        "records": grouped.size(),
        "ok": grouped["ok"].sum(),
        "failed": grouped["failed"].sum(),
        "random": grouped["random"].sum(),
        "evolved": grouped["evolved"].sum(),
        "best_us": grouped["lat_us"].min(),
        "median_us": grouped["lat_us"].median(),
    })
    if by == "family":
        table.insert(0, "workloads", grouped["workload_key"].nunique())
    return table


def _devices(frame: pd.DataFrame) -> list[str]:
    """The measuring devices named by the records (schema 2), e.g. "cuda NVIDIA H100 (9.0)"."""
    import json

    names = set()
    for text in frame["device"].dropna().unique():
        if text:
            d = json.loads(text)
            names.add(" ".join(str(x) for x in (d.get("kind"), d.get("model")) if x)
                      + (f" ({d['compute']})" if d.get("compute") else ""))
    return sorted(names)


def task_hash(ir_json: str) -> str:
    """The structural hash of a workload's IRModule (names and keys aside)."""
    import tvm
    import tvm_ffi

    return f"{tvm_ffi.structural_hash(tvm.ir.load_json(ir_json), map_free_vars=True):016x}"


def format_together(roots: list[str]) -> str:
    """What the datasets in `roots` hold together, as text: records, targets, distinct tasks
    (structural hash) and those with at least `ENOUGH` successful schedules on one target."""
    counts: dict[tuple[str, str], int] = {}  # (task hash, target) -> ok schedules
    records = ok_records = 0
    hashes: dict[str, str] = {}  # workload IR -> task hash
    targets = set()
    for root in roots:
        frame = read_records(root, columns=["workload_ir", "target", "status"])
        records += len(frame)
        frame = frame[frame["status"] == OK]
        ok_records += len(frame)
        for (ir, target), n in frame.groupby(["workload_ir", "target"]).size().items():
            key = (hashes.setdefault(ir, task_hash(ir)), target)
            counts[key] = counts.get(key, 0) + int(n)
            targets.add(target)
    tasks = {h for h, _ in counts}
    enough = {h for (h, _), n in counts.items() if n >= ENOUGH}
    return (f"together: {records} records, {ok_records} ok, of {len(targets)} targets; "
            f"{len(tasks)} distinct tasks (structural hash), {len(enough)} with at least "
            f"{ENOUGH} ok schedules on one target")


def format_stats(root: str, by: str = "both") -> str:
    """The summary of the dataset in `root` as text (`by` "none": its first lines only)."""
    frame = read_records(root, columns=COLUMNS)
    if frame.empty:
        raise UserError(f"{root} holds no records; collect some with 'datagen collect --out "
                        f"{root}'")
    ok = frame["status"] == OK
    failures = frame.loc[~ok, "status"].value_counts()
    span = frame["collected_at"].max() - frame["collected_at"].min()
    lines = [
        f"dataset {root}: {len(frame)} records, {int(ok.sum())} ok, {int((~ok).sum())} failed "
        f"({', '.join(f'{k} {v}' for k, v in failures.items()) or 'none'})",
        f"workloads {frame['workload_key'].nunique()}, families {frame['family'].nunique()}; "
        f"targets {', '.join(sorted(frame['target_kind'].unique()))}; "
        f"cpu {', '.join(sorted(frame['cpu_model'].unique()))}; "
        f"devices {', '.join(_devices(frame)) or 'not recorded'}; "
        f"threads {', '.join(str(t) for t in sorted(frame['num_threads'].unique()))}",
        f"protocol {', '.join(sorted(frame['protocol'].unique()))}; "
        f"noisy (cv > 5%): {int((frame['latency_cv'] > 0.05).sum())}; measured twice (spread "
        f"over the threshold the first time): {int(frame['retry_latencies'].map(len).gt(0).sum())}"
        f"; collected over {span}",
    ]
    with pd.option_context("display.width", 200, "display.max_rows", 1000,
                           "display.float_format", "{:.1f}".format):
        if by in ("family", "both"):
            lines += ["", summarise(frame, "family").to_string()]
        if by in ("workload", "both"):
            lines += ["", summarise(frame, "workload_key").to_string()]
    return "\n".join(lines)
