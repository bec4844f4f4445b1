"""bench/blend_weight.py: the rule that chooses the blend weight on out-of-distribution
validation workloads, and its bad input (its real run: bench/results/ood/blend-weight)."""

import json
import lzma
import shutil

from conftest import assert_clean_error, bench_module, run_bench


def _script():
    return bench_module("blend_weight.py")


def _curve(top1: dict, tau: float = 0.3) -> dict:
    return {f"{w / 10:.1f}": {"top1_score": top1.get(w, 0.5), "kendall_tau": tau}
            for w in range(11)}


def test_the_weight_whose_worst_validation_top1_is_highest_wins():
    choose = _script().choose
    # one source favours the network, the other the trees: the weight good on both wins
    a = _curve({3: 0.6, 9: 0.9, 10: 0.9})
    b = _curve({0: 0.9, 3: 0.55, 9: 0.1, 10: 0.1})
    assert choose({"a": a, "b": b}) == "0.3"
    assert choose({"a": a}) == "0.9"  # ties: the higher tau, then nearer 1/2
    flat = {"x": {k: {"top1_score": 0.5, "kendall_tau": 0.4 if k == "0.7" else 0.3}
                  for k in _curve({})}}
    assert choose(flat) == "0.7"
    assert choose({"x": _curve({})}) == "0.5"
    # several tree models: every split of the blend in tenths, keyed by each share
    blends = _script().blends(2)
    assert len(blends) == 66 and blends["0.1/0.5/0.4"] == (0.1, 0.5, 0.4)
    assert all(abs(sum(b) - 1) < 1e-9 for b in blends.values())
    curve = {k: {"top1_score": 0.9 if k in ("0.1/0.5/0.4", "0.3/0.3/0.4") else 0.5,
                 "kendall_tau": 0.3} for k in blends}
    assert choose({"x": curve}) == "0.3/0.3/0.4"  # the network's share nearer 1/2


def test_bad_input_is_one_line(tmp_path):
    proc = run_bench("blend_weight.py", "--checkpoint", "checkpoints/graphsage-v3.ckpt",
                     "--dataset", "data/llvm-full", "--ablation", str(tmp_path),
                     "--out", str(tmp_path / "out"))
    assert_clean_error(proc, "no readable summary.json", prog="blend_weight")
    (tmp_path / "summary.json").write_text(json.dumps({"variants": {"base": {}}}))
    proc = run_bench("blend_weight.py", "--checkpoint", "checkpoints/graphsage-v3.ckpt",
                     "--dataset", "data/llvm-full", "--ablation", str(tmp_path),
                     "--out", str(tmp_path / "out"))
    assert_clean_error(proc, "no variant blended with xgb", prog="blend_weight")
    (tmp_path / "f").write_text("x")
    proc = run_bench("blend_weight.py", "--checkpoint", "checkpoints/graphsage-v3.ckpt",
                     "--dataset", "data/llvm-full", "--out", str(tmp_path / "f" / "out"))
    assert_clean_error(proc, "is a file", prog="blend_weight")
    alone = tmp_path / "model.ckpt"  # a checkpoint without its pretrained XGBModel beside it
    shutil.copy("checkpoints/graphsage-v3.ckpt", alone)
    proc = run_bench("blend_weight.py", "--checkpoint", str(alone), "--dataset", "data/llvm-full",
                     "--out", str(tmp_path / "out"))
    assert_clean_error(proc, "model.xgb.npz is missing", prog="blend_weight")
    shutil.copy("checkpoints/graphsage-v3.xgb.npz", tmp_path / "model.xgb.npz")
    proc = run_bench("blend_weight.py", "--checkpoint", str(alone), "--with", "xgb", "mlp",
                     "--dataset", "data/llvm-full", "--out", str(tmp_path / "out"))
    assert_clean_error(proc, "model.mlp.npz is missing: the checkpoint's mlp model",
                       prog="blend_weight")
    for args, message in ((["--with", "trees"], "--with trees: no such companion"),
                          (["--with", "xgb", "mlp", "--ablation", str(tmp_path)],
                           "give them with --with xgb alone")):
        proc = run_bench("blend_weight.py", "--checkpoint", str(alone), *args,
                         "--dataset", "data/llvm-full", "--out", str(tmp_path / "out"))
        assert_clean_error(proc, message, prog="blend_weight")
    assert not (tmp_path / "out").exists()


def test_a_run_of_several_variants_gives_the_checkpoints_own_curve(tmp_path):
    curves = _script().ablation_curves
    hybrid = {"with": "xgb", "val_curve": _curve({})}
    (tmp_path / "summary.json").write_text(json.dumps(
        {"variants": {"a": {"hybrid": hybrid}, "b": {"hybrid": hybrid}, "c": {}}}))
    assert list(curves(str(tmp_path), "b")) == ["b"]
    packed = tmp_path / "packed"  # committed results are xz-packed
    packed.mkdir()
    with lzma.open(packed / "summary.json.xz", "wt") as f:
        f.write((tmp_path / "summary.json").read_text())
    assert list(curves(str(packed), "a")) == ["a"]
    proc = run_bench("blend_weight.py", "--checkpoint", "checkpoints/graphsage-v3.ckpt",
                     "--dataset", "data/llvm-full", "--ablation", str(tmp_path),
                     "--out", str(tmp_path / "out"))
    assert_clean_error(proc, "tried 2 variants (a, b); name the checkpoint's with --variant",
                       prog="blend_weight")
    proc = run_bench("blend_weight.py", "--checkpoint", "checkpoints/graphsage-v3.ckpt",
                     "--dataset", "data/llvm-full", "--ablation", str(tmp_path), "--variant",
                     "c", "--out", str(tmp_path / "out"))
    assert_clean_error(proc, "no variant 'c' blended with xgb (it has a, b)",
                       prog="blend_weight")
    assert not (tmp_path / "out").exists()
