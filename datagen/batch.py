"""Measuring where the device cannot be reached from here: build here, measure there, ingest.

The third way to measure, beside this host (`datagen collect`) and an RPC tracker
(`--tracker`), for a device host behind a batch queue or in an isolated lab:

    datagen pack networks --target nvidia/nvidia-h100 --dataset data/h100 --out batch-001
    # carry batch-001/ to the device host; there, with only the TVM runtime:
    TVM_USE_RUNTIME_LIB=1 python -m datagen.batch_measure batch-001
    # carry batch-001/results.jsonl back; here:
    datagen ingest batch-001 --dataset data/h100

`pack` draws the next round of every unfinished workload from what the dataset already holds
(random at first, then mutations of the fastest measured schedules), exactly as `collect`
draws them, builds the candidates here as shared libraries, and writes the batch folder:
`manifest.json` (what the measuring side needs), `artifacts/` and `pending.parquet` (the
records, waiting for their measurements). A batch packed before the last one is ingested names
it with `--after`, so that it draws around that batch's candidates rather than the same ones.
`--replay DATASET` draws nothing: it builds again the schedules another device's dataset of the
same target measured, so that this batch's device times the same programs. `datagen.batch_measure` appends one line per
candidate to `results.jsonl`, resumably. `ingest` turns the results into records, one shard
per call, and is idempotent: a candidate the dataset already holds is skipped, so ingesting
twice (or a partly measured batch, then the rest) never duplicates anything. Results of
another batch, or of a workload whose definition changed, are refused. Pack the next batch
after ingesting this one, so its evolved candidates come from what was measured.
"""

from __future__ import annotations

import datetime
import json
import os
import shutil
import uuid

from datagen import records
from datagen.batch_measure import ARTIFACTS, MANIFEST, RESULTS, read_manifest, read_results
from datagen.collect import (CollectConfig, candidate_row, draw_rounds, load_state,
                             measurement_columns, refuse_other_gpu)
from datagen.errors import UserError, atomic_path
from datagen.measure import (BUILD_ERROR, BUILD_TIMEOUT, DEFAULT_PROTOCOL, OK, STATUSES,
                             MeasureResult)
from datagen.tvm_env import target_json, versions

PENDING = "pending.parquet"
PENDING_STATUS = "pending"
FORMAT_VERSION = 1
BUILD_CHUNK = 64  # candidates per builder call, for the progress bar


def _device_type(target) -> str:
    return "cpu" if target.kind.name == "llvm" else target.kind.name


def pack(cfg: CollectConfig, out: str, progress: bool = True, after: list[str] = (),
         replay: str | None = None) -> dict:
    """Draw and build the next round of every unfinished workload of `cfg` (whose `out` is the
    dataset to draw from) into the new batch folder `out`. The batches `after` (packed from the
    same dataset, not yet ingested) count as drawn: their candidates are neither drawn again
    nor counted twice, and the rounds go on from theirs. With `replay` (a dataset of the same
    target measured on another device), nothing is drawn: every schedule that dataset measured
    of `cfg`'s workloads is built again, to be measured on this batch's device (see
    `replayed`).

    Returns {"batch", "candidates" (built, to measure), "build_failed", "bytes"}.

    Raises:
        UserError: `out` exists, a batch of `after` is not one or is for another target, or
            nothing is left to collect (to replay).
    """
    from tqdm import tqdm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo
    from tvm.s_tir.meta_schedule.builder import BuilderInput

    from datagen.builder import (DEFAULT_BUILD_TIMEOUT_SEC, TIMEOUT_PREFIX, PersistentBuilder,
                                 remove_artifact)

    if os.path.exists(out):
        raise UserError(f"{out} already exists; pack each batch into a new folder")
    target_text = target_json(cfg.target)
    states = load_state(cfg.out, target_text) if os.path.isdir(cfg.out) else {}
    for batch_dir in after:
        _fold_pending(states, batch_dir, target_text)
    protocol = {**DEFAULT_PROTOCOL, **(cfg.protocol or {})}
    ver = versions()
    context = {"target": target_text, "target_kind": cfg.target.kind.name, "cpu_model": "",
               "device": "", "num_threads": 0, "protocol": json.dumps(protocol),
               "seed": cfg.seed, "tvm_version": ver["tvm"], "tvm_ffi_version": ver["tvm_ffi"],
               "project_version": ver["project"]}
    if replay:
        drawn = replayed(cfg, replay, states, target_text, progress)
        if not drawn:
            raise UserError(f"{cfg.out} holds every schedule {replay} measured of these "
                            "workloads: nothing to pack")
    else:
        drawn = draw_rounds(cfg, states, progress)
    if not drawn:
        raise UserError(f"every workload already has {cfg.per_workload} candidates in {cfg.out} "
                        "(or no unseen schedule left): nothing to pack")
    tmp = f"{out}.tmp-{uuid.uuid4().hex[:6]}"
    os.makedirs(os.path.join(tmp, ARTIFACTS))
    builder = PersistentBuilder(cfg.target.kind.name, cfg.build_workers,
                                cfg.build_timeout or DEFAULT_BUILD_TIMEOUT_SEC,
                                shared_library=True)
    batch_id = uuid.uuid4().hex
    rows, candidates, size = [], [], 0
    try:
        built, build_secs = [], []
        bar = tqdm(total=len(drawn), desc="build", unit="cand", disable=not progress)
        for start in range(0, len(drawn), BUILD_CHUNK):
            chunk = drawn[start:start + BUILD_CHUNK]
            built += builder.build([BuilderInput(c.mod, cfg.target) for _, _, c, _ in chunk])
            build_secs += builder.last_build_secs
            bar.update(len(chunk))
        bar.close()
        for i, ((w, definition, cand, round_), res, secs) in enumerate(
                zip(drawn, built, build_secs)):
            if res.error_msg is not None:
                status = BUILD_TIMEOUT if res.error_msg.startswith(TIMEOUT_PREFIX) else BUILD_ERROR
                result = MeasureResult(status, [], res.error_msg[-2000:])
            else:
                result = MeasureResult(PENDING_STATUS, [], "", secs)
                name = f"{i:06d}.so"
                shutil.copyfile(res.artifact_path, os.path.join(tmp, ARTIFACTS, name))
                remove_artifact(res.artifact_path)
                size += os.path.getsize(os.path.join(tmp, ARTIFACTS, name))
                args = [list(a.as_json()) for a in
                        ArgInfo.from_entry_func(cand.mod, remove_preproc=True)]
                candidates.append({"index": i, "workload_key": w.key,
                                   "trace_hash": cand.trace_hash, "artifact": name,
                                   "args": [[str(a[0]), str(a[1]), [int(d) for d in a[2]]]
                                            for a in args]})
            rows.append({**candidate_row(w, definition, cand, result, round_, context),
                         "batch_index": i})
        manifest = {"format": FORMAT_VERSION, "batch": batch_id, "target": target_text,
                    "target_kind": cfg.target.kind.name, "device_type": _device_type(cfg.target),
                    "protocol": protocol, "retry_cv": cfg.retry_cv, "candidates": candidates}
        with open(os.path.join(tmp, MANIFEST), "w", encoding="utf-8") as handle:
            json.dump(manifest, handle)
        _write_pending(os.path.join(tmp, PENDING), rows)
        os.replace(tmp, out)
    finally:
        builder.shutdown()
        shutil.rmtree(tmp, ignore_errors=True)
    return {"batch": batch_id, "candidates": len(candidates),
            "build_failed": len(rows) - len(candidates), "bytes": size}


def replayed(cfg: CollectConfig, dataset: str, states: dict, target_text: str,
             progress: bool = True) -> list[tuple]:
    """The schedules that `dataset` measured (status ok) of `cfg.workloads`, replayed from their
    traces, as `draw_rounds` returns candidates: (workload, definition, candidate, round), the
    record's own round, origin and parent. The same schedules timed on another device of the
    target (an H200 running the `nvidia/nvidia-h100` kernels that an H100 measured) are a
    dataset for transfer across devices. Those the dataset to ingest into holds (`states`) are
    left out, so a second pack after an ingest packs only the rest.

    Raises:
        UserError: `dataset` is of another target, holds no measured record of a workload,
            or defines a workload otherwise than this project does.
    """
    from tqdm import tqdm

    from datagen.records import read_records
    from datagen.sampler import Candidate, replay

    frame = read_records(dataset)
    other = sorted(set(frame.target) - {target_text})
    if other:
        raise UserError(f"{dataset} holds records of another target than --target "
                        f"({len(other)} other); replay a dataset of the same target")
    measured = dict(tuple(frame[frame.status == OK].groupby("workload_key")))
    drawn = []
    for w in tqdm(cfg.workloads, desc="replay", unit="wl", disable=not progress):
        rows = measured.get(w.key)
        if rows is None:
            raise UserError(f"{dataset} holds no measured record of {w.key}: replay only "
                            "workloads it measured")
        definition = w.definition()
        if (rows.workload_ir != definition).any():
            raise UserError(f"{dataset} defines {w.key} otherwise than this project does: "
                            "its schedules would not replay as measured")
        seen = states[w.key].seen if w.key in states else set()
        for r in rows.itertuples():
            if r.trace_hash in seen:
                continue
            sch = replay(w.mod, r.trace)
            drawn.append((w, definition, Candidate(sch.mod, r.trace, r.trace_hash, r.origin,
                                                   r.parent_hash, r.mutator, sch), int(r.round)))
    return drawn


def _fold_pending(states: dict, batch_dir: str, target_text: str) -> None:
    """Add an un-ingested batch's candidates to the draw state, as `load_state` adds records
    (those the dataset holds already are skipped, so an ingested batch changes nothing).

    Raises:
        UserError: not a batch, or one packed for another target.
    """
    import pandas as pd

    from datagen.collect import WorkloadState

    try:
        manifest = read_manifest(batch_dir)
    except UserError as err:
        raise UserError(f"--after: {err}") from None
    if manifest["target"] != target_text:
        raise UserError(f"--after: {batch_dir} was packed for another target than this pack's; "
                        "name only batches of this dataset")
    path = os.path.join(batch_dir, PENDING)
    if not os.path.isfile(path):
        raise UserError(f"--after: {batch_dir} has no {PENDING}: name the folder datagen pack "
                        "wrote")
    pending = pd.read_parquet(path, columns=["workload_key", "trace_hash", "round"])
    for key, trace_hash, round_ in pending.itertuples(index=False):
        st = states.setdefault(key, WorkloadState())
        if trace_hash in st.seen:
            continue
        st.count += 1
        st.rounds = max(st.rounds, int(round_) + 1)
        st.seen.add(trace_hash)


def _write_pending(path: str, rows: list[dict]) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    schema = records.SCHEMA.append(pa.field("batch_index", pa.int32()))
    pq.write_table(pa.Table.from_pylist(rows, schema=schema), path,
                   compression=records.COMPRESSION)


def _result(line: dict, build_secs: float) -> MeasureResult:
    status = line["status"] if line["status"] in STATUSES else "run_error"
    return MeasureResult(status, [float(x) for x in line["latencies"]], line.get("error", ""),
                         build_secs, float(line.get("run_secs", float("nan"))))


def ingest(batch_dir: str, dataset: str, results_path: str | None = None) -> dict:
    """Add a measured batch's records to `dataset`; see the module doc.

    Returns {"ingested", "already", "unmeasured"}.

    Raises:
        UserError: not a batch, results of another batch or not matching it, a workload whose
            definition differs from the dataset's records of it, results measured on another
            GPU than the dataset's records.
    """
    import pandas as pd

    manifest = read_manifest(batch_dir)
    lines = read_results(results_path or os.path.join(batch_dir, RESULTS), manifest["batch"])
    if manifest.get("format") != FORMAT_VERSION:
        raise UserError(f"{batch_dir} is a batch of format {manifest.get('format')}, this "
                        f"version reads {FORMAT_VERSION}: pack it again")
    pending = pd.read_parquet(os.path.join(batch_dir, PENDING))
    hashes = dict(zip(pending.batch_index, pending.trace_hash))
    firsts, retries = {}, {}
    for line in lines:
        if hashes.get(line["index"]) != line["trace_hash"]:
            raise UserError(f"result for candidate {line['index']} names schedule "
                            f"{line['trace_hash'][:12]}, which this batch does not hold there: "
                            "the results come from a changed batch")
        (retries if line.get("retry") else firsts)[line["index"]] = line
    existing = records.read_records(dataset, ["workload_key", "workload_ir", "target", "device",
                                              "trace_hash"]) if os.path.isdir(dataset) else None
    seen: set = set()
    if existing is not None and len(existing):
        existing = existing[existing.target == manifest["target"]]
        for device in {json.dumps(line["device"], sort_keys=True) for line in lines}:
            refuse_other_gpu(dataset, existing.device, json.loads(device),
                             "ingest the batch into another dataset folder")
        seen = set(zip(existing.workload_key, existing.trace_hash))
        known = dict(zip(existing.workload_key, existing.workload_ir))
        for key, ir in zip(pending.workload_key, pending.workload_ir):
            if key in known and known[key] != ir:
                raise UserError(f"workload {key} in {dataset} was collected from another "
                                "definition than this batch's: ingest into a new dataset "
                                "folder, or pack the batch again from this dataset")
    rows, already, unmeasured = [], 0, 0
    now = datetime.datetime.now(datetime.timezone.utc)
    for row in pending.to_dict("records"):
        index = row.pop("batch_index")
        if (row["workload_key"], row["trace_hash"]) in seen:
            already += 1
            continue
        if row["status"] == PENDING_STATUS:
            line = firsts.get(index)
            if line is None:
                unmeasured += 1
                continue
            res = _result(line, row["build_secs"])
            if index in retries:
                res.retry = _result(retries[index], row["build_secs"])
            row.update(measurement_columns(res))
            row.update(device=json.dumps(line["device"], sort_keys=True),
                       cpu_model=line.get("host_cpu", ""), num_threads=line.get("threads", 0))
        row["collected_at"] = now
        rows.append(row)
    if rows:
        writer = records.ShardWriter(dataset)
        try:
            writer.write(rows)
        finally:
            writer.close()
    return {"ingested": len(rows), "already": already, "unmeasured": unmeasured,
            "ok": sum(r["status"] == OK for r in rows)}


COMPILER_LIBRARY = "libtvm_compiler.so"


def runtime_bundle(out: str) -> tuple[int, int]:
    """Write the installed `tvm` package without its compiler library (and without bytecode
    caches) as a tar archive (`.tar.gz`, `.tar.xz` or `.tar`, by `out`'s name): what a device
    host needs, with apache-tvm-ffi for its own Python, to run `datagen.batch_measure` under
    `TVM_USE_RUNTIME_LIB=1`. Returns (files, bytes written).

    Raises:
        UserError: an archive name of another kind, or a place that cannot be written.
    """
    import tarfile

    import tvm

    modes = {".tar.gz": "w:gz", ".tgz": "w:gz", ".tar.xz": "w:xz", ".tar": "w"}
    mode = next((m for ext, m in modes.items() if out.endswith(ext)), None)
    if mode is None:
        raise UserError(f"{out}: name the bundle .tar.gz, .tar.xz or .tar")
    root = os.path.dirname(tvm.__file__)
    count = 0

    def keep(info: tarfile.TarInfo):
        nonlocal count
        name = os.path.basename(info.name)
        if name == COMPILER_LIBRARY or name == "__pycache__" or name.endswith(".pyc"):
            return None
        count += info.isfile()
        return info

    with atomic_path(out, os.path.splitext(out)[1]) as tmp, tarfile.open(tmp, mode) as tar:
        tar.add(root, arcname="tvm", filter=keep)  # a bundle is whole or absent
    return count, os.path.getsize(out)
