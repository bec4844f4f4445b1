"""Move records both ways between our dataset and MetaSchedule's JSON database.

MetaSchedule keeps two files: `database_workload.json` (one IRModule per line) and
`database_tuning_record.json` (trace, run seconds, target, argument info per line). Import
turns each tuning record into one of our records (origin "imported"); export writes our
successful records as tuning records, so `tune_tir`, `compile_tir` and relax integration
read them directly.
"""

from __future__ import annotations

import datetime
import json
import math
import os

from datagen import records
from datagen.measure import OK, RUN_ERROR, latency_stats, run_latency
from datagen.errors import UserError, output_folder
from datagen.sampler import hash_text, trace_hash, trace_to_json
from datagen.tvm_env import target_json, to_python, versions

WORKLOAD_FILE = "database_workload.json"
RECORD_FILE = "database_tuning_record.json"
IMPORT_BATCH = 512


def _registry_index() -> dict:
    """Structural hash -> registry workload, to give imported modules their registry key."""
    import tvm_ffi

    from datagen.workloads import SUITES

    return {tvm_ffi.structural_hash(w.mod): w for suite in SUITES.values() for w in suite}


def _load_database(workload_json: str, record_json: str):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    for path in (workload_json, record_json):
        if not os.path.isfile(path):
            raise UserError(f"MetaSchedule database file {path} does not exist")
    try:
        return JSONDatabase(workload_json, record_json, allow_missing=False)
    except Exception as err:  # noqa: BLE001
        first = str(err).strip().splitlines()[-1] if str(err).strip() else type(err).__name__
        raise UserError(f"{workload_json} / {record_json} is not a MetaSchedule JSON database "
                        f"({first[:200]})") from None


def import_database(workload_json: str, record_json: str, out: str) -> int:
    """Append every tuning record of a MetaSchedule database to the dataset `out`.

    Records already in `out` (same workload and trace) are skipped. Returns how many were added.
    """
    import tvm
    import tvm_ffi

    db = _load_database(workload_json, record_json)
    index = _registry_index()
    existing = records.read_records(out, ["workload_key", "trace_hash"]) \
        if os.path.isdir(out) else None
    seen = set() if existing is None else set(zip(existing.workload_key, existing.trace_hash))
    ver = versions()
    writer = records.ShardWriter(out)
    rows, added = [], 0
    try:
        for rec in db.get_all_tuning_records():
            mod = rec.workload.mod
            known = index.get(tvm_ffi.structural_hash(mod))
            key = known.key if known else f"imported/{hash_text(mod.script())[:12]}"
            trace = trace_to_json(rec.trace)
            digest = trace_hash(trace)
            if (key, digest) in seen:
                continue
            seen.add((key, digest))
            lat = [float(x) for x in (rec.run_secs or [])]
            ok = run_latency(lat) is not None
            target = rec.target
            rows.append({
                "workload_key": key, "family": known.family if known else "imported",
                "workload_params": known.params_json if known else "{}",
                "workload_ir": tvm.ir.save_json(mod),
                "network": known.network if known else "", "workload_weight": 1,
                "target": target_json(target) if target is not None else "",
                "target_kind": target.kind.name if target is not None else "",
                "cpu_model": "", "device": "", "num_threads": 0, "trace": trace, "trace_hash": digest,
                "origin": "imported", "parent_hash": "", "mutator": "", "round": 0,
                "status": OK if ok else RUN_ERROR, "error": "" if ok else "failed in source",
                "latencies": lat, "retry_latencies": [], **latency_stats(lat),
                "build_secs": math.nan, "run_secs": math.nan, "protocol": "{}", "seed": 0,
                "tvm_version": ver["tvm"], "tvm_ffi_version": ver["tvm_ffi"],
                "project_version": ver["project"],
                "collected_at": datetime.datetime.now(datetime.timezone.utc),
            })
            if len(rows) == IMPORT_BATCH:
                writer.write(rows)
                added += len(rows)
                rows = []
        if rows:
            writer.write(rows)
            added += len(rows)
    finally:
        writer.close()
    return added


def _whole_lines(path: str) -> int:
    """The lines of `path` that end in a newline, or -1 if its last line is cut off."""
    if not os.path.exists(path):
        return 0
    with open(path, "rb") as f:
        data = f.read()
    return data.count(b"\n") if not data or data.endswith(b"\n") else -1


def export_database(dataset: str, out: str) -> int:
    """Write the successful records of `dataset` as a MetaSchedule JSON database in `out`.

    Refuses to touch a folder that already holds a database. Returns the records written.
    """
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.database import JSONDatabase, TuningRecord

    frame = records.read_records(dataset, ["workload_key", "workload_ir", "trace", "target",
                                           "latencies", "status"])
    frame = frame[frame.status == OK]
    if frame.empty:
        raise UserError(f"{dataset} has no successful records to export")
    paths = [os.path.join(out, WORKLOAD_FILE), os.path.join(out, RECORD_FILE)]
    if any(os.path.exists(p) for p in paths):
        raise UserError(f"{out} already holds a MetaSchedule database; choose an empty folder")
    output_folder(out)
    tmp = [f"{p}.tmp-{os.getpid()}" for p in paths]
    try:
        db = JSONDatabase(*tmp, allow_missing=True)
        for _, group in frame.groupby("workload_key", sort=False):
            mod = tvm.ir.load_json(group.workload_ir.iloc[0])
            workload = db.commit_workload(mod)
            args = [a.as_json() for a in ArgInfo.from_entry_func(mod, remove_preproc=True)]
            for row in group.itertuples(index=False):
                target = to_python(tvm.target.Target(json.loads(row.target)).export()) \
                    if row.target else None
                rec = TuningRecord.from_json(
                    [json.loads(row.trace), [float(x) for x in row.latencies], target, args],
                    workload)
                db.commit_tuning_record(rec)
        # TVM's writer reports no failed write (a full disk): count the whole lines written
        if _whole_lines(tmp[0]) < 1 or _whole_lines(tmp[1]) != len(frame):
            raise OSError("no space left on the disk, or the folder is not writable")
        for src, dst in zip(tmp, paths):
            os.replace(src, dst)  # both files appear only once complete
    except OSError as err:
        if os.path.exists(paths[0]) and not os.path.exists(paths[1]):
            os.remove(paths[0])  # the workloads' file replaced, the records' not: neither stays
        raise UserError(f"cannot write the database in {out}: {err.strerror or err}; nothing "
                        "is written there (free space, then run again)") from None
    finally:
        for p in tmp:
            if os.path.exists(p):
                os.remove(p)
    return len(frame)
