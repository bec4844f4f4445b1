"""Records move both ways between our dataset and a database written by a real `tune_tir`."""

import os

import pytest

from conftest import assert_clean_error, run_cli
from datagen.records import read_records

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def tuned_db(tmp_path_factory):
    """A MetaSchedule JSON database from 8 trials of `tune_tir` on a 32^3 dense."""
    from tvm.s_tir import meta_schedule as ms

    from datagen.builder import PersistentBuilder
    from datagen.tvm_env import make_target, metaschedule_logging
    from datagen.workloads import Workload

    work_dir = str(tmp_path_factory.mktemp("tune"))
    target = make_target(None)
    builder = PersistentBuilder("llvm")
    try:
        with metaschedule_logging():
            ms.tune_tir(Workload("dense", (32, 32, 32)).mod, target, work_dir,
                        max_trials_global=8, num_trials_per_iter=4, builder=builder, seed=0)
    finally:
        builder.shutdown()
    return work_dir


def _records_of(db):
    return sorted((str(r.trace), tuple(float(x) for x in r.run_secs))
                  for r in db.get_all_tuning_records())


def test_import_then_export_gives_the_same_database(tuned_db, tmp_path):
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    wl = os.path.join(tuned_db, "database_workload.json")
    rec = os.path.join(tuned_db, "database_tuning_record.json")
    original = JSONDatabase(wl, rec, allow_missing=False)
    n = len(original.get_all_tuning_records())
    assert n >= 4

    data = str(tmp_path / "ds")
    proc = run_cli("import-db", wl, rec, "--out", data, check=True)
    assert f"imported {n} tuning records" in proc.stdout
    frame = read_records(data)
    assert len(frame) == n and (frame.workload_key == "dense/m32_n32_k32").all()
    assert set(frame.origin) == {"imported"}
    # importing again adds nothing
    assert "imported 0 tuning records" in run_cli("import-db", wl, rec, "--out", data,
                                                   check=True).stdout

    exported = str(tmp_path / "db")
    run_cli("export-db", data, "--out", exported, check=True)
    ok = int((frame.status == "ok").sum())
    back = JSONDatabase(work_dir=exported, allow_missing=False)
    assert len(back.get_all_tuning_records()) == ok
    assert _records_of(back) == [r for r in _records_of(original) if r[1][0] < 1e9]
    assert_clean_error(run_cli("export-db", data, "--out", exported), "already holds")


def test_exported_collection_applies_with_compile_tir(tmp_path):
    """Our own records, exported, are a database `compile_tir` applies."""
    import tvm
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from datagen.tvm_env import make_target
    from datagen.workloads import Workload

    data, db_dir = str(tmp_path / "ds"), str(tmp_path / "db")
    run_cli("collect", "dense/m32_n32_k32", "--out", data, "--per-workload", "4",
            "--batch-size", "4", "--no-progress", check=True)
    run_cli("export-db", data, "--out", db_dir, check=True)
    db = JSONDatabase(work_dir=db_dir, allow_missing=False)
    target = make_target(None)
    sch = ms.tir_integration.compile_tir(db, Workload("dense", (32, 32, 32)).mod, target)
    assert sch is not None
    assert str(sch.trace) == str(db.get_all_tuning_records()[0].trace)
    tvm.compile(sch.mod, target=target)


def test_import_bad_database(tmp_path):
    missing = str(tmp_path / "none.json")
    assert_clean_error(run_cli("import-db", missing, missing, "--out", str(tmp_path / "o")),
                       "does not exist")
    wl, rec = tmp_path / "w.json", tmp_path / "r.json"
    wl.write_text("not json\n")
    rec.write_text("")
    assert_clean_error(run_cli("import-db", str(wl), str(rec), "--out", str(tmp_path / "o")),
                       "is not a MetaSchedule JSON database")


# the export under a limit on the size of every file this process writes, as on a disk that
# fills up (EFBIG instead of ENOSPC, the same failed write that TVM's writer does not report)
EXPORT_UNTIL_FULL = """
import resource, signal, sys
from datagen.cli import main

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (int(sys.argv[1]), resource.RLIM_INFINITY))
sys.exit(main(sys.argv[2:]))
"""


def test_an_export_that_cannot_be_written_is_one_line_and_leaves_nothing(tuned_db, tmp_path):
    import subprocess
    import sys

    data, out = str(tmp_path / "ds"), tmp_path / "db"
    run_cli("import-db", os.path.join(tuned_db, "database_workload.json"),
            os.path.join(tuned_db, "database_tuning_record.json"), "--out", data, check=True)
    # room for the workload (about 24 KB) and a record or two (about 6 KB each), not for all
    proc = subprocess.run([sys.executable, "-c", EXPORT_UNTIL_FULL, str(32 << 10), "export-db",
                           data, "--out", str(out)], capture_output=True, text=True, timeout=300)
    assert_clean_error(proc, f"cannot write the database in {out}")
    assert "nothing is written there" in proc.stderr
    assert list(out.iterdir()) == []  # no database, no temporary file
    run_cli("export-db", data, "--out", str(out), check=True)  # with room, the same works
    assert len(list(out.iterdir())) == 2
