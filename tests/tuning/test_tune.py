"""The BO search strategy and the `tune` CLI, with real builds and measurements."""

import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time

import numpy as np
import pytest
import torch

from conftest import assert_clean_error, needs_no_gpu, run_cli, tiny_mlp
from tuning.runs import read_json
from tuning.tuner import apply_database, best_so_far, read_curve

pytestmark = pytest.mark.slow

WORKLOAD = "dense/m32_n32_k32"


def tune_with_batches(tmp_path, strategy, trials: int, per_iter: int, name: str = "run"):
    """`tune_tir` with `strategy`; the work dir and the size of every measured batch."""
    from tvm.ir.utils import derived_object
    from tvm.s_tir import meta_schedule as ms
    from tvm.s_tir.meta_schedule.measure_callback import PyMeasureCallback

    from datagen.measure import Measurer
    from datagen.suites import resolve
    from datagen.tvm_env import load_tensor_intrinsics, make_target, metaschedule_logging

    @derived_object
    class BatchSizes(PyMeasureCallback):
        def __init__(self):
            super().__init__()
            self.sizes = []

        def apply(self, task_scheduler, task_id, candidates, builder_results, runner_results):
            self.sizes.append(len(runner_results))

    target = make_target(None)
    load_tensor_intrinsics("llvm")
    measurer = Measurer(target, protocol={"repeat": 3, "min_repeat_ms": 5})
    sizes = BatchSizes()
    work = str(tmp_path / name)
    try:
        with metaschedule_logging():
            db = ms.tune_tir(resolve([WORKLOAD])[0].mod, target, work, max_trials_global=trials,
                             num_trials_per_iter=per_iter, builder=measurer.builder,
                             runner=measurer.runner, cost_model="random", strategy=strategy,
                             measure_callbacks=[*ms.MeasureCallback.create("default"), sizes])
    finally:
        measurer.close()
    return work, db, sizes.sizes


def traces(work: str) -> list[str]:
    with open(os.path.join(work, "database_tuning_record.json")) as f:
        return [json.dumps(json.loads(line)[1][0]) for line in f]


def test_bo_loop_with_learned_prior(tiny_checkpoint, tmp_path):
    from costmodel.predictor import CostModelPredictor
    from tuning.search import BayesOptSearch

    predictor = CostModelPredictor.load(tiny_checkpoint)
    search = BayesOptSearch(predictor, pool_size=32, seed=3)
    work, db, sizes = tune_with_batches(tmp_path, search, trials=12, per_iter=4)
    assert sizes == [4, 4, 4]  # only the top-k of each round is measured
    (curve,) = read_curve(work).values()
    assert len(curve) == 12 and np.isfinite(curve).sum() >= 10
    best = best_so_far(curve)
    assert np.all(np.diff(best) <= 0)  # the best never gets worse as trials grow
    # the curve is the database's records in measured order, each the median of its repeats
    from datagen.measure import run_latency

    latencies = [run_latency(r.run_secs) for r in db.get_all_tuning_records()]
    assert np.isclose(min(x for x in latencies if x is not None), best[-1])

    # the same seed picks the same first round (the prior's top-k); another seed does not
    again, _, _ = tune_with_batches(tmp_path, BayesOptSearch(predictor, pool_size=32, seed=3),
                                    trials=4, per_iter=4, name="again")
    other, _, _ = tune_with_batches(tmp_path, BayesOptSearch(predictor, pool_size=32, seed=4),
                                    trials=4, per_iter=4, name="other")
    assert traces(again) == traces(work)[:4]
    assert traces(other) != traces(work)[:4]


def test_bo_mix_tunes_with_the_network_and_the_pretrained_xgbmodel(tiny_checkpoint, tmp_path):
    """bo-mix in MetaSchedule's loop: its prior has the network's and the pretrained
    XGBModel's part (the tiny checkpoint has no LightGBM companion), reweighted online."""
    from costmodel.predictor import CostModelPredictor
    from costmodel.store_models import load_xgb
    from costmodel.pretrained_xgb import pretrained_xgb_file
    from tuning.search import BayesOptSearch

    predictor = CostModelPredictor.load(tiny_checkpoint)
    xgb = load_xgb(pretrained_xgb_file(tiny_checkpoint, predictor.meta, str(tmp_path / "cache"),
                                       progress=False))
    search = BayesOptSearch(predictor, "prior-mix", pool_size=32, seed=0, xgb=xgb)
    work, _, sizes = tune_with_batches(tmp_path, search, trials=12, per_iter=4)
    assert sizes == [4, 4, 4]
    assert np.isfinite(next(iter(read_curve(work).values()))).sum() >= 10
    # its prior's parts, on schedules of the workload: the network's and the XGBModel's
    from datagen.suites import resolve
    from datagen.sampler import ScheduleSampler
    from datagen.tvm_env import make_target
    from tuning.search import PriorMix

    sampler = ScheduleSampler(resolve([WORKLOAD])[0].mod, make_target(None))
    cands = sampler.random(6, 0, set())
    mix = PriorMix(predictor, 0, xgb=xgb, context=sampler.context)
    assert mix.names == ["network", "xgb"]  # the tiny checkpoint has no LightGBM companion
    x, parts = mix.features(cands)
    assert parts.shape == (6, 2) and np.isfinite(parts).all() and len(x) == 6
    network_alone = np.log(predictor.score_schedules([c.sch for c in cands])[0])
    assert np.allclose(parts[:, 0], network_alone)
    assert np.ptp(parts[:, 1]) > 0  # the XGBModel tells the schedules apart


def test_bo_learn_trains_its_priors_xgbmodel_on_the_run(tiny_checkpoint, tmp_path):
    """bo-learn in MetaSchedule's loop: before any measurement its prior is the checkpoint's
    blend; once measurements are in, the blend's XGBModel has trained on them (the pretrained
    one left as it was) and the prior moves with it."""
    from costmodel.blend import blend
    from costmodel.predictor import CostModelPredictor
    from tuning.search import LEARN_MIN_MEASURED, BayesOptSearch

    checkpoint = str(tmp_path / "model.ckpt")
    shutil.copy(tiny_checkpoint, checkpoint)
    run_cli("blend", checkpoint, "--with", "xgb", "--weight", "0.3", prog="costmodel",
            check=True)
    predictor = CostModelPredictor.load(checkpoint)
    search = BayesOptSearch(predictor, "prior-learn", pool_size=32, seed=0)
    work, _, sizes = tune_with_batches(tmp_path, search, trials=12, per_iter=4)
    assert sizes == [4, 4, 4]
    assert np.isfinite(next(iter(read_curve(work).values()))).sum() >= 10

    # its surrogate on schedules of the workload: before any measurement its prior is the
    # checkpoint's own blend; fitted on measurements, the XGBModel has trained on them (the
    # pretrained one left as it was) and the prior moved with it
    from datagen.sampler import ScheduleSampler
    from datagen.suites import resolve
    from datagen.tvm_env import make_target
    from tuning.search import PriorLearn

    cands = ScheduleSampler(resolve([WORKLOAD])[0].mod, make_target(None)).random(24, 0, set())
    surrogate = PriorLearn(predictor, 0)
    x, parts = surrogate.features(cands)
    assert parts.shape == (24, 2) and np.isfinite(parts).all()
    surrogate.fit(x, [], np.zeros(0), np.zeros(0))
    before = surrogate.posterior(x, parts)[0]
    np.testing.assert_allclose(before, blend(parts[:, 0], parts[:, 1:], np.zeros(24), 0.3),
                               atol=1e-9)
    y = np.log(np.linspace(1.0, 2.0, LEARN_MIN_MEASURED))  # "measured": faster first
    surrogate.fit(x, x[:LEARN_MIN_MEASURED], parts[:LEARN_MIN_MEASURED], y)
    pretrained = predictor.companion.model
    assert surrogate.pretrained is pretrained and surrogate.xgb is not pretrained
    assert surrogate.xgb.fitted_on["trained_on"] == LEARN_MIN_MEASURED
    assert "trained_on" not in pretrained.fitted_on
    learned = surrogate.parts(x)[:, 1]
    assert not np.allclose(learned, parts[:, 1])
    assert np.isfinite(surrogate.posterior(x, parts)[0]).all()

    # the tasks of one run share what the XGBModel learns: MetaSchedule tuned a clone of the
    # search, which learnt into the run it shares with the search; in a network's run a task
    # with three measurements of its own has a prior trained on every task's
    (_, measured), = search.run["learning"].measured.values()  # its one task's, 2 rounds
    assert len(measured) >= 6
    run = {}
    first, second = (PriorLearn(predictor, 0, run=run, task=t) for t in ("a", "b"))
    first.fit(x, x[:LEARN_MIN_MEASURED], parts[:LEARN_MIN_MEASURED], y)
    second.fit(x, x[LEARN_MIN_MEASURED:][:3], parts[LEARN_MIN_MEASURED:][:3], y[:3])
    assert second.learning is first.learning
    assert second.xgb.fitted_on["trained_on"] == LEARN_MIN_MEASURED + 3
    alone = PriorLearn(predictor, 0, task="b")
    alone.fit(x, x[:3], parts[:3], y[:3])
    assert alone.xgb is pretrained  # three of its own are too few to learn from


def test_bo_learn_needs_a_checkpoint_blended_with_the_xgbmodel(tiny_checkpoint):
    from costmodel.predictor import CostModelPredictor
    from datagen.errors import UserError
    from tuning.search import BayesOptSearch

    with pytest.raises(UserError, match="needs a checkpoint blended with MetaSchedule's "
                                        "XGBModel .this one's companion: none."):
        BayesOptSearch(CostModelPredictor.load(tiny_checkpoint), "prior-learn")


def test_ytopt_style_forest_needs_no_model(tmp_path):
    from tuning.search import BayesOptSearch

    search = BayesOptSearch(None, "forest", "lcb", pool_size=32, evolve_fraction=0.0, seed=0)
    work, _, sizes = tune_with_batches(tmp_path, search, trials=8, per_iter=4)
    assert sizes == [4, 4]
    assert len(next(iter(read_curve(work).values()))) == 8


def test_tuning_survives_foreign_handlers_on_metaschedule_logger(tmp_path):
    """An unnamed handler on MetaSchedule's logger (pytest 9 and many logging set-ups attach
    one) made TVM's `create_loggers` crash with `None.format`; tuning works and the handler is
    put back afterwards."""
    import logging

    from datagen.measure import Measurer
    from datagen.suites import resolve
    from datagen.tvm_env import METASCHEDULE_LOGGER, make_target
    from tuning.tuner import tune_workload

    logger = logging.getLogger(METASCHEDULE_LOGGER)
    unnamed, named = logging.NullHandler(), logging.NullHandler()
    named.set_name("host-application")
    assert unnamed.get_name() is None
    logger.addHandler(unnamed)
    logger.addHandler(named)
    target = make_target(None)
    measurer = Measurer(target, protocol={"repeat": 3, "min_repeat_ms": 5})
    try:
        for run in ("first", "second"):  # the second run meets MetaSchedule's own handlers too
            tune_workload(resolve([WORKLOAD])[0].mod, target, "random", 4, str(tmp_path / run),
                          measurer, trials_per_iter=4)
            assert len(next(iter(read_curve(str(tmp_path / run)).values()))) == 4
            assert unnamed in logger.handlers and named in logger.handlers
    finally:
        measurer.close()
        logger.removeHandler(unnamed)
        logger.removeHandler(named)


def test_tune_run_database_applies_with_compile_tir(tiny_checkpoint, tmp_path):
    import tvm
    from tvm.s_tir import meta_schedule as ms

    from datagen.suites import resolve
    from datagen.tvm_env import make_target

    out = tmp_path / "out"
    proc = run_cli("run", WORKLOAD, "--trials", "8", "--trials-per-iter", "4", "--out",
                   str(out), "--checkpoint", tiny_checkpoint, "--no-progress", prog="tune",
                   check=True)
    work = out / WORKLOAD.replace("/", "__")
    assert "8 trials, best" in proc.stdout
    assert (work / "best_schedule.py").exists() and (work / "curve.png").exists()

    mod, target = resolve([WORKLOAD])[0].mod, make_target(None)
    db = ms.database.JSONDatabase(work_dir=str(work))
    sch = ms.tir_integration.compile_tir(db, mod, target)
    assert sch is not None
    lib = tvm.compile(sch.mod, target=target)
    a, b = np.random.rand(32, 32).astype("float32"), np.random.rand(32, 32).astype("float32")
    dev = tvm.cpu()
    args = [tvm.runtime.tensor(x, dev) for x in (a, b)] + \
        [tvm.runtime.tensor(np.zeros((32, 32), "float32"), dev)]
    lib["main"](*args)
    np.testing.assert_allclose(args[2].numpy(), a @ b.T, rtol=1e-4)


def test_tune_compare_against_pretrained_xgb_with_remeasured_finalists(tiny_checkpoint,
                                                                       tmp_path):
    tuners = ["bo", "ms-xgb-pretrained", "ms-default"]
    out = tmp_path / "cmp"
    args = ["compare", WORKLOAD, "--tuners", *tuners, "--trials", "8", "--trials-per-iter", "4",
            "--budgets", "4", "8", "--remeasure-rounds", "3", "--out", str(out),
            "--checkpoint", tiny_checkpoint, "--no-progress"]
    proc = run_cli(*args, prog="tune", check=True)
    assert "geometric mean over workloads" in proc.stdout
    assert "XGBModel trained beforehand" in proc.stdout  # it says what each tuner is
    assert "bo@8 / ms-xgb-pretrained@8: ratio" in proc.stdout
    summary = json.loads((out / "summary.json").read_text())
    assert list(summary["workloads"][WORKLOAD]) == tuners
    assert all(math.isfinite(r["remeasured@8"]) for r in summary["workloads"][WORKLOAD].values())
    paired = {(p["ours"], p["baseline"]): p for p in summary["paired"]}
    assert set(paired) == {("bo", "ms-xgb-pretrained"), ("bo", "ms-default")}
    row = paired[("bo", "ms-default")]
    assert row["n"] == 1 and row["wins"] + row["ties"] + row["losses"] == 1
    # every finalist was re-measured 3 times, all together
    (pair,) = out.glob("pairs/*__seed0.json.xz")
    data = read_json(str(pair))
    assert data["rounds"] == 3 and all(len(v) == 3 for v in data["budgets"]["8"].values())
    assert json.loads(data["target"])["kind"] == "llvm" and set(data["curves"]) == set(tuners)
    # each run's wall time, kept with the pair, as seconds per trial in the summary
    assert set(data["wall_s"]) == set(tuners) and all(s > 0 for s in data["wall_s"].values())
    for tuner, row in summary["workloads"][WORKLOAD].items():
        assert row["s_per_trial"] == pytest.approx(data["wall_s"][tuner] / 8)
    assert "s/trial" in proc.stdout
    # the pretrained XGBModel was fitted on the checkpoint's training records and cached
    assert len(list((out / "cache").glob("xgb-pretrained-*.xgb.npz"))) == 1
    assert (out / "curves.png").exists()
    # a finished comparison is read back, not tuned or re-measured again
    files = sorted(out.glob("runs/**/database_tuning_record.json")) + [pair]
    before = [p.read_bytes() for p in files]
    run_cli(*args, prog="tune", check=True)
    assert json.loads((out / "summary.json").read_text()) == summary
    assert len(files) == 4 and [p.read_bytes() for p in files] == before
    # and from its pair file alone, without the databases (as in a fresh clone of results)
    shutil.rmtree(out / "runs")
    run_cli(*args, prog="tune", check=True)
    assert json.loads((out / "summary.json").read_text()) == summary
    assert not (out / "runs").exists()
    # --report summarises the finished pairs and tunes nothing, as for a comparison under way
    (out / "summary.json").unlink()
    proc = run_cli(*args, "--report", prog="tune", check=True)
    assert "bo@8 / ms-xgb-pretrained@8: ratio" in proc.stdout
    assert json.loads((out / "summary.json").read_text()) == summary
    assert not (out / "runs").exists()


def test_tune_a_pytorch_model(tiny_checkpoint, tmp_path):
    import tvm
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from datagen.defaults import COLD_PROTOCOL
    from datagen.torch_import import load_exported, relax_module
    from datagen.tvm_env import make_target

    path = str(tmp_path / "mlp.pt2")
    model = tiny_mlp()
    x = torch.randn(4, 16)
    torch.export.save(torch.export.export(model, (x,)), path)
    out = tmp_path / "net"
    proc = run_cli("run", "--torch-model", path, "--trials", "8", "--trials-per-iter", "4",
                   "--out", str(out), "--checkpoint", tiny_checkpoint, "--no-progress",
                   prog="tune", check=True)
    assert "tasks; database in" in proc.stdout
    curves = read_curve(str(out))
    assert len(curves) >= 2 and sum(len(c) for c in curves.values()) == 8
    # a network's tasks are timed cold on a CPU by default, as the network meets its weights
    lines = (out / "database_tuning_record.json").read_text().splitlines()
    assert {len(json.loads(line)[1][1]) for line in lines if line.strip()} == {
        COLD_PROTOCOL["repeat"]}

    # every tuned task's record applies to the module `tune_network` tuned
    target = make_target(None)
    mod = relax_module(load_exported(path), target)
    applied = apply_database(ms.database.JSONDatabase(work_dir=str(out)), mod, target)
    scheduled = [f for f in applied.functions.values() if isinstance(f, tvm.tirx.PrimFunc)
                 and f.attrs is not None and "tirx.is_scheduled" in f.attrs]
    assert len(scheduled) == len(curves)

    vm = relax.VirtualMachine(tvm.runtime.load_module(str(out / "network.so")), tvm.cpu())
    got = vm["main"](tvm.runtime.tensor(x.numpy(), tvm.cpu()))
    got = got[0] if not hasattr(got, "numpy") else got
    np.testing.assert_allclose(got.numpy(), model(x).detach().numpy(), rtol=1e-4, atol=1e-5)


def test_tune_run_timing_cold_times_every_candidate_with_the_cold_protocol(tmp_path):
    from datagen.defaults import COLD_PROTOCOL, DEFAULT_PROTOCOL

    repeats = {}
    for name, extra in (("hot", []), ("cold", ["--timing", "cold"])):
        out = tmp_path / name
        run_cli("run", WORKLOAD, "--tuner", "random", "--trials", "4", "--trials-per-iter", "4",
                "--out", str(out), "--no-progress", *extra, prog="tune", check=True)
        records = (out / WORKLOAD.replace("/", "__") / "database_tuning_record.json")
        repeats[name] = {len(json.loads(line)[1][1])
                         for line in records.read_text().splitlines() if line.strip()}
    # each record keeps every timed repeat: five of hot runs each, ten single cold runs
    assert repeats == {"hot": {DEFAULT_PROTOCOL["repeat"]}, "cold": {COLD_PROTOCOL["repeat"]}}

    # resumed with the other timing: refused before anything is measured, nothing lost
    work = tmp_path / "hot" / WORKLOAD.replace("/", "__")
    before = (work / "database_tuning_record.json").read_bytes()
    proc = run_cli("run", WORKLOAD, "--tuner", "random", "--trials", "4", "--trials-per-iter",
                   "4", "--out", str(tmp_path / "hot"), "--no-progress", "--timing", "cold",
                   prog="tune")
    assert_clean_error(proc, "holds candidates timed hot, and this run times them cold",
                       prog="tune")
    assert (work / "database_tuning_record.json").read_bytes() == before


def test_a_run_records_its_timing_and_a_resumed_one_must_match(tmp_path):
    from datagen.defaults import COLD_PROTOCOL, DEFAULT_PROTOCOL
    from datagen.errors import UserError
    from tuning.tuner import TIMING_FILE, check_timing

    hot, cold = dict(DEFAULT_PROTOCOL), {**DEFAULT_PROTOCOL, **COLD_PROTOCOL}
    check_timing(str(tmp_path), hot)
    check_timing(str(tmp_path), hot)  # the same timing resumes
    assert json.loads((tmp_path / TIMING_FILE).read_text()) == {"protocol": hot}
    with pytest.raises(UserError, match="timed hot, and this run times them cold"):
        check_timing(str(tmp_path), cold)
    other = {**hot, "repeat": 3}
    with pytest.raises(UserError, match='times them {"min_repeat_ms": 20, "number": 1, '
                       '"repeat": 3, "warmup": 1}'):
        check_timing(str(tmp_path), other)
    # a folder measured before timings were recorded resumes unchecked and stays so
    legacy = tmp_path / "legacy"
    legacy.mkdir()
    (legacy / "database_tuning_record.json").write_text("[0, []]\n")
    check_timing(str(legacy), cold)
    assert not (legacy / TIMING_FILE).exists()
    (tmp_path / TIMING_FILE).write_text("{")
    with pytest.raises(UserError, match="is unreadable"):
        check_timing(str(tmp_path), hot)


def test_a_network_budget_below_one_round_per_task_is_one_line(tmp_path):
    """MetaSchedule's task scheduler would stop before the last tasks got a round and build
    them untuned: refused before anything is written."""
    path = str(tmp_path / "mlp.pt2")
    torch.export.save(torch.export.export(tiny_mlp(), (torch.randn(4, 16),)), path)
    out = tmp_path / "net"
    proc = run_cli("run", "--torch-model", path, "--trials", "4", "--trials-per-iter", "4",
                   "--tuner", "random", "--out", str(out), "--no-progress", prog="tune")
    assert_clean_error(proc, "4 trials are below one round per task: the network has 2 tasks "
                       "and a round measures 4, so give at least 8 trials", prog="tune")
    assert not out.exists() or not any(out.iterdir())


def test_interrupted_run_keeps_its_measurements(tiny_checkpoint, tmp_path):
    out = tmp_path / "int"
    records = out / WORKLOAD.replace("/", "__") / "database_tuning_record.json"
    proc = subprocess.Popen([sys.executable, "-m", "tuning.cli", "run", WORKLOAD, "--trials",
                             "400", "--trials-per-iter", "4", "--out", str(out),
                             "--checkpoint", tiny_checkpoint, "--no-progress"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 300
    while time.time() < deadline and (not records.exists() or
                                      len(records.read_text().splitlines()) < 4):
        time.sleep(0.5)
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130, err
    assert "measurements made so far are in" in err
    lines = records.read_text().splitlines()
    assert len(lines) >= 4
    assert all(json.loads(line) for line in lines)  # every committed record is whole


# From the second round on, the runs go to this host's GPU, which is not there (no GPU in CI), as
# the runs of a tuner whose GPU went away would: the real runner fails, and the device check
# finds the device gone.
LOSE_THE_GPU = """
import sys
from tvm.ir.utils import derived_object
from tvm.s_tir.meta_schedule.runner import PyRunner, RunnerInput
from datagen import measure
from tuning import cli

@derived_object
class ToAbsentGpu(PyRunner):
    def __init__(self, runner, measurer):
        super().__init__()
        self.runner, self.measurer, self.rounds = runner, measurer, 0

    def run(self, inputs):
        self.rounds += 1
        if self.rounds > 1:
            self.measurer.device_type = "cuda"
            inputs = [RunnerInput(i.artifact_path, "cuda", i.args_info) for i in inputs]
        return self.runner.run(inputs)

real_init = measure.Measurer.__init__

def __init__(self, *args, **kwargs):
    real_init(self, *args, **kwargs)
    self.runner = ToAbsentGpu(self.runner, self)

measure.Measurer.__init__ = __init__
sys.exit(cli.main(sys.argv[1:]))
"""


@needs_no_gpu
def test_a_gpu_lost_mid_tuning_is_one_line_and_keeps_the_trials_before(tmp_path):
    """A round whose programs fail to run on a device that is gone stops the tuning with one
    line and exit status 2, before that round reaches the database: the rounds before it stay
    there, and no failure is recorded for the lost device."""
    out = tmp_path / "lost"
    proc = subprocess.run([sys.executable, "-c", LOSE_THE_GPU, "run", WORKLOAD, "--tuner",
                           "random", "--trials", "12", "--trials-per-iter", "4", "--out",
                           str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert_clean_error(proc, "the cuda device disappeared while tuning; the trials measured "
                             "before are in", prog="tune")
    curve = next(iter(read_curve(str(out / WORKLOAD.replace("/", "__"))).values()))
    assert len(curve) == 4 and all(math.isfinite(latency) for latency in curve)


@needs_no_gpu
def test_a_gpu_lost_mid_network_is_one_line_and_keeps_the_tasks_tuned_before(tmp_path):
    """The same in the middle of a whole network: its first task's round stays in the
    database, the second task's, on the lost device, never reaches it."""
    path = str(tmp_path / "mlp.pt2")
    torch.export.save(torch.export.export(tiny_mlp(), (torch.randn(4, 16),)), path)
    out = tmp_path / "lost"
    proc = subprocess.run([sys.executable, "-c", LOSE_THE_GPU, "run", "--torch-model", path,
                           "--tuner", "random", "--trials", "12", "--trials-per-iter", "4",
                           "--out", str(out), "--no-progress"],
                          capture_output=True, text=True, timeout=600)
    assert_clean_error(proc, "the cuda device disappeared while tuning; the trials measured "
                             "before are in", prog="tune")
    curves = read_curve(str(out))
    assert [len(c) for c in curves.values()] == [4]
    assert all(math.isfinite(latency) for c in curves.values() for latency in c)
    assert not (out / "network.so").exists()


# no file of the tuning process may grow past 48 KiB, as on a disk that fills up mid-run (EFBIG
# instead of ENOSPC, the same failed write): the database's records file (about 6 KB a record
# for this workload, its workload file 24 KB) hits it after a round or two; the builds' small
# files do not
WRITE_UNTIL_FULL = """
import resource, signal, sys
from tuning import cli

signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, (48 << 10, resource.RLIM_INFINITY))
sys.exit(cli.main(sys.argv[1:]))
"""


def test_a_full_disk_mid_tuning_is_one_line_and_keeps_the_rounds_before(tmp_path):
    """TVM's database writer reports no failed write: the tuning checks the files after each
    round, stops with one line that says how many trials are kept, and cuts off the part of a
    record that was written; the same command then goes on from the database."""
    out, work = tmp_path / "full", tmp_path / "full" / WORKLOAD.replace("/", "__")
    args = ["run", WORKLOAD, "--tuner", "random", "--trials", "64", "--trials-per-iter", "4",
            "--out", str(out), "--no-progress"]
    proc = subprocess.run([sys.executable, "-c", WRITE_UNTIL_FULL, *args],
                          capture_output=True, text=True, timeout=600)
    assert_clean_error(proc, f"cannot write the tuning database in {work}", prog="tune")
    kept = int(proc.stderr.split(" trials committed")[0].rsplit(" ", 1)[1])
    lines = (work / "database_tuning_record.json").read_text().splitlines(keepends=True)
    assert kept >= 4 and kept % 4 == 0 and len(lines) == kept  # whole rounds only
    assert all(line.endswith("\n") and json.loads(line) for line in lines)
    assert (work / "database_tuning_record.json").stat().st_size <= 48 << 10
    again = run_cli(*args[:5], "4", *args[6:], prog="tune")
    assert again.returncode == 0, again.stderr
    assert len(next(iter(read_curve(str(work)).values()))) == kept + 4


@pytest.mark.parametrize("args, match", [
    (["run", "no/such_workload"], "unknown workload"),
    (["run", "dense/m0_n128_k128"], "m must be an integer of at least 1"),
    (["run", WORKLOAD, "--trials", "0"], "--trials must be at least 1"),
    (["run", WORKLOAD, "--tracker", "127.0.0.1:1", "--key", "gpu"], "is unreachable"),
    (["run", "--torch-model", "missing.pt2"], "does not exist"),
    (["run", WORKLOAD, "--checkpoint", "missing.ckpt"], "does not exist"),
    (["run", WORKLOAD, "--trials", "4", "--trials-per-iter", "8"], "a budget below one round"),
    (["run", WORKLOAD, "--threads", "0"], "--threads must be at least 1"),
    (["run", WORKLOAD, "--network-share", "1.5"], "--network-share is a share in [0, 1]"),
    (["run", WORKLOAD, "--timing", "cold", "--target", "cuda"],
     "--timing cold flushes the CPU caches"),
    (["compare", WORKLOAD, "--network-share", "0.5"], "has none beside it"),  # no companion
    (["compare", WORKLOAD, "--budgets", "0", "8"], "--budgets are trial counts, at least 1"),
    (["compare", WORKLOAD, "--report"], "no finished (workload, seed) pair of these tuners"),
    (["compare", WORKLOAD, "--tuners", "ms-xgb-pretrained", "--dataset", "no/such/dir"],
     "expected in no/such/dir, which does not exist; pass --dataset DIR"),
])
def test_bad_input(args, match, tmp_path, tiny_checkpoint):
    # in this process (each case in one of its own imported TVM and torch again: 15-25 s);
    # the relative paths named exist nowhere, here or in the test's folder
    extra = [] if "--checkpoint" in args else ["--checkpoint", tiny_checkpoint]
    proc = run_cli(*args, *extra, "--out", str(tmp_path / "o"), prog="tune")
    assert_clean_error(proc, match, prog="tune")


@pytest.mark.parametrize("command", ["run", "compare"])
def test_an_out_that_is_a_file_is_one_line_before_any_work(command, tmp_path, tiny_checkpoint):
    blocked = tmp_path / "a-file"
    blocked.write_text("x")
    for out in (blocked, blocked / "sub"):
        proc = run_cli(command, WORKLOAD, "--checkpoint", tiny_checkpoint, "--out", str(out),
                       prog="tune")
        assert_clean_error(proc, "is a file, not a folder", prog="tune")
    assert blocked.read_text() == "x"


def test_checkpoint_for_another_target_kind(tiny_checkpoint, tmp_path):
    from costmodel import checkpoint

    ckpt = checkpoint.load(tiny_checkpoint)
    meta = {**ckpt.meta, "target": json.dumps({"kind": "cuda", "arch": "sm_80"}),
            "target_kind": "cuda"}
    path = str(tmp_path / "cuda.ckpt")
    checkpoint.save(path, ckpt.model, meta, ckpt.hparams)
    proc = run_cli("run", WORKLOAD, "--checkpoint", path, "--out", str(tmp_path / "o"),
                   prog="tune")
    assert_clean_error(proc, "was trained for cuda targets, not llvm", prog="tune")


def test_the_default_checkpoint_is_the_shipped_one_of_the_targets_kind():
    from costmodel import checkpoint, checkpoints
    from datagen.errors import UserError
    from tuning.tuner import load_predictor

    for kind, name in (("llvm", "graphsage-v3.ckpt"), ("cuda", "graphsage-h100.ckpt")):
        path = checkpoints.for_target(kind)
        assert os.path.basename(path) == name
        assert checkpoint.load_members(path, target_kind=kind)[0].meta["target_kind"] == kind
        assert load_predictor(None, target_kind=kind).meta["target_kind"] == kind
    assert load_predictor(None).meta["target_kind"] == "llvm"
    with pytest.raises(UserError, match="no checkpoint ships for rocm targets"):
        checkpoints.for_target("rocm")


@needs_no_gpu
def test_a_cuda_target_without_checkpoint_takes_the_gpu_model(tmp_path):
    """No --checkpoint for a cuda target: the shipped GPU model loads (no refusal of the CPU
    model's target), and the run stops only where this host has no GPU to measure on."""
    proc = run_cli("run", WORKLOAD, "--target", "nvidia/nvidia-h100", "--out",
                   str(tmp_path / "o"), prog="tune")
    assert_clean_error(proc, "measuring a cuda target needs a cuda device", prog="tune")
    assert "trained for" not in proc.stderr


def test_not_an_exported_model(tiny_checkpoint, tmp_path):
    bogus = tmp_path / "model.pt2"
    bogus.write_bytes(b"nope")
    proc = run_cli("run", "--torch-model", str(bogus), "--checkpoint", tiny_checkpoint,
                   "--out", str(tmp_path / "o"), prog="tune")
    assert_clean_error(proc, "is not a torch.export program", prog="tune")


def test_side_by_side_runs_get_equal_slices_of_the_cores_but_the_measuring_one():
    from tuning.side_by_side import core_slices

    assert core_slices(range(16), 3) == ([[0, 1, 2, 3, 4], [5, 6, 7, 8, 9],
                                          [10, 11, 12, 13, 14]], [15])
    slices, measuring = core_slices(range(16), 6)  # 15 // 6: two each, three left idle
    assert slices == [[0, 1], [2, 3], [4, 5], [6, 7], [8, 9], [10, 11]] and measuring == [15]
    assert core_slices([3, 1], 2) == ([[1], [1]], [3])  # more runs than cores: they share
    assert core_slices([0], 2) == ([[0], [0]], None)


def threads_cores(_=None) -> dict[str, str]:
    """Each thread of this process: the cores it may run on (as /proc lists them)."""
    out = {}
    for thread in os.listdir("/proc/self/task"):
        with open(f"/proc/self/task/{thread}/status") as f:
            allowed = [line for line in f if line.startswith("Cpus_allowed_list:")]
        out[thread] = allowed[0].split(":", 1)[1].strip()
    return out


def test_a_side_by_side_worker_keeps_every_thread_on_its_slice():
    """A spawned worker imports numpy before its initializer runs, and OpenBLAS starts its
    threads on every core then: `_take_cores` pins those too, not only the main thread, so
    nothing of a run's search reaches the core that measures."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    from tuning.side_by_side import _take_cores

    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    core = min(os.sched_getaffinity(0))
    queue.put([core])
    with ProcessPoolExecutor(1, mp_context=context, initializer=_take_cores,
                             initargs=(queue,)) as pool:
        cores = pool.submit(threads_cores).result(timeout=120)
    assert set(cores.values()) == {str(core)}, cores


def test_runs_of_several_pairs_side_by_side_in_their_own_processes(tiny_checkpoint, tmp_path):
    """`jobs` 2: the runs of two (workload, seed) pairs tune two at a time, each in a process
    of its own (bo with the checkpoint loaded again there) on its slice of cores, with as many
    threads, and marked done there; each pair is re-measured here and written once its runs
    are finished. Run again, everything is read back: nothing is tuned or re-measured again."""
    from datagen.measure import Measurer
    from datagen.suites import resolve
    from datagen.tvm_env import make_target
    from tuning.compare import run_curves
    from tuning.runs import model_ids, models_used, pair_file, run_dir
    from tuning.side_by_side import core_slices
    from tuning.tuner import SearchInputs, load_predictor

    target = make_target(None)
    (w,) = resolve([WORKLOAD])
    tuners, seeds, out = ["bo", "random"], [0, 1], str(tmp_path / "cmp")
    threads = len(core_slices(os.sched_getaffinity(0), 2)[0][0])
    inputs = SearchInputs(load_predictor(tiny_checkpoint))
    models = model_ids(inputs)
    measurer = Measurer(target, protocol={"repeat": 3, "min_repeat_ms": 5})
    try:
        results, remeasured = run_curves([w], tuners, 4, seeds, out, target, measurer, inputs,
                                         2, progress=False, rounds=2, jobs=2)
        dirs = {(t, s): run_dir(out, w.key, t, s) for t in tuners for s in seeds}
        for (tuner, _), wd in dirs.items():
            with open(os.path.join(wd, "done")) as f:
                done = json.load(f)
            assert done.pop("wall_s") > 0  # the run's search time, for s/trial
            assert done == {"trials": 4, "models": models_used(tuner, models),
                            "threads": threads, "device": measurer.device}
            (curve,) = read_curve(wd).values()
            assert len(curve) == 4
        assert models_used("bo", models) == models  # bo's names the checkpoint it loaded
        assert all(len(results[w.key][t]) == 2 and all(len(c) == 4 for c in results[w.key][t])
                   for t in tuners)
        assert all(len(r) == 2 for t in tuners for r in remeasured[w.key][4][t])
        pairs = [pair_file(out, w.key, s) for s in seeds]
        for s, path in zip(seeds, pairs):
            pair = read_json(path)
            assert pair["curves"] == {t: results[w.key][t][s] for t in tuners}
            assert pair["models"] == models and pair["device"] == measurer.device
        kept = {p: os.path.getmtime(p) for p in [*pairs, *(os.path.join(
            wd, "database_tuning_record.json") for wd in dirs.values())]}
        again = run_curves([w], tuners, 4, seeds, out, target, measurer, inputs, 2,
                           progress=False, rounds=2, jobs=2)
    finally:
        measurer.close()
    assert again == (results, remeasured)
    assert kept == {p: os.path.getmtime(p) for p in kept}  # nothing tuned or measured again


