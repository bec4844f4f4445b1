"""Benchmark: our BO tuner against MetaSchedule's tuners, on workloads the model never saw.

Part 1, held-out shapes: the test workloads of `graphsage.ckpt`'s split (the first shipped
model, trained on data/llvm-full; `tune`'s default is now graphsage-v3.ckpt, trained on network
workloads and the same CPU's generated tasks, with the hand-written suite held out).
Part 2, a held-out family: workloads of a family that a second checkpoint (trained with
`--data.split family --data.test_families '[FAMILY]'`) never saw.
Every tuner runs in MetaSchedule's own loop with the same builder, runner and batch size, at the
same seeds, one after another on this machine; with two budgets (64 256), only the --long-tuners
(the baselines: ms-xgb-pretrained, ms-default) run to the larger one, the others stop at the
smaller, which is enough for "ours at 64 against theirs at 256". The tuners: bo (ours),
ms-xgb-pretrained (EvolutionarySearch + XGBModel pretrained on the checkpoint's training
records, TenSet's transfer baseline), ms-default (EvolutionarySearch + XGBModel, random scores
until 100 measurements), ms-ours (EvolutionarySearch + our model) and random (ReplayTrace);
ytopt (random-forest BO with LCB, no prior) with --ytopt. After each (workload, seed), every
tuner's best schedule at each budget is re-measured with the others, interleaved, 10 times, and
tuners are compared on those: paired ratios per (workload, seed), wins/ties/losses, the
geometric-mean ratio with a paired bootstrap 95% interval, trials to reach (see
`tuning.compare`). Writes summary.json, results.json.xz and curves.png. Finished runs are kept
under --out/runs (databases) and each finished (workload, seed) under --out/pairs (curves,
finalists, re-measurements and the target it was measured on; small, kept in git), and read
back, so an interrupted benchmark resumes, also on another machine. --report tunes nothing and
summarises the pairs finished so far.

Part 3, end to end: a small PyTorch CNN tuned with one total budget by bo and by ms-default,
and the compiled network's latency of both and of the untuned build. Its finished runs are
read back (under --out/tuning-network/runs); another budget or target there is refused.

Part `networks`, whole networks outside every training suite (a CNN and a transformer of the
network catalogue, `--networks`): every task tuned with MetaSchedule's task scheduler at equal
total budgets of 16 and 64 trials per task (`--network-budgets`) by bo, ms-xgb-pretrained and
ms-default, per seed; the compiled networks measured interleaved (`--rounds`, default 30),
with the budget at which each reaches ms-default's latency at its largest and each tuner's
search wall time per trial (`network_tuning.py` says how; needs the `networks` extra to
build the networks; `--report` summarises the finished pairs without it):

    python bench/tuning_vs_metaschedule.py --parts networks --seeds 0 1 2 \
        [--networks poolformer-s12 electra-small] [--network-budgets 16 64]

bo at 64 against ms-default at 256 trials per task, measured interleaved (bo's run read back
where the pair's is on disk): `--network-budgets 64 --network-reach 256`.

A variant of bo beside them (an ablation in a folder of its own, the others' runs read back):
`--network-tuners bo bo-learn ms-xgb-pretrained ms-default --network-ours bo-learn bo` pairs
bo-learn with each other tuner and bo with the baselines.

Part 5 (`--parts gpu --target nvidia/nvidia-h100`, on the GPU host): held-out shapes on the
GPU, with `graphsage-h100.ckpt` (trained on data/cuda-h100, these four workloads held out) and
its shipped pretrained XGBModel; every tuner measures on this host's GPU. For the GPU issue's
comparison: `--tuners bo ms-xgb-pretrained ms-default --trials 64`.

Part 4 (`--parts v2`), held-out networks with cost model v2: seven tasks of six families from
the three networks that v2's evaluation checkpoint never saw (`graphsage-v2-networks.ckpt`,
trained on dataset v2 with ResNet-50, MobileNetV2 and T5-small encoder held out; a task that
also occurs in a training network is not held out). The held-out shapes of part 1 cannot serve
v2: its networks (ViT-B/16, ResNet-18/50, MobileNetV2, BERT) contain those very computations.
ms-xgb-pretrained is then XGBModel trained on that checkpoint's training records.

    python bench/tuning_vs_metaschedule.py [--seeds 0 1 2] [--trials 64 256] [--parts shapes v2]
                                           [--family-checkpoint CKPT] [--report]
    python bench/tuning_vs_metaschedule.py --parts gpu --target nvidia/nvidia-h100 --seeds 0 \
        --trials 64 --tuners bo ms-xgb-pretrained ms-default --out bench/results/cuda-h100 \
        [--jobs 3]

With a GPU --target, --jobs N tunes up to N runs at once, each in a process of its own: the
tuners of a (workload, seed), and as runs end those of the next pairs, in order. They search
and build side by side, each on an equal slice of the host's cores and with as many threads,
while their measurements take turns on the GPU (on a core of their own), so the comparison is
the same and only its wall time shrinks; as soon as
a pair's runs are finished, its finalists are re-measured together, holding the GPU.
"""

from __future__ import annotations

import argparse
import os
import shutil
import time

SHAPES_WORKLOADS = [
    "batch_matmul/b12_m197_n197_k64",
    "conv2d/h28_w28_ci128_co128_k3_stride1_pad1",
    "conv2d_bias_relu/h28_w28_ci512_co128_k1_stride1_pad0",
    "dense/m197_n2304_k768",
    "depthwise_conv2d/h14_w14_c384_k3_stride1_pad1",
    "group_conv2d/h14_w14_ci512_co512_k3_stride1_pad1_groups32",
    "softmax/rows1536_cols128",
]
FAMILY_WORKLOADS = [
    "depthwise_conv2d/h56_w56_c144_k3_stride1_pad1",
    "depthwise_conv2d/h28_w28_c192_k3_stride1_pad1",
    "depthwise_conv2d/h14_w14_c384_k3_stride1_pad1",
]
# part 4: tasks of the networks graphsage-v2-networks.ckpt held out (its test side), chosen to
# span six families; their best measured schedules take 6 to 150 us
V2_WORKLOADS = [
    "torch/conv2d_subtract_divide_multiply_add_relu_7a929631757051fb",  # ResNet-50 conv+bn+relu
    "torch/conv2d_subtract_divide_multiply_add_tir_clip_71629f5d26c4e668",  # MobileNetV2 1x1
    "torch/conv2d_subtract_divide_multiply_add_tir_clip_pad_193799bd895e7dfa",  # depthwise
    "torch/matmul_38de8004e961782d",  # T5 dense
    "torch/matmul_6744619831113eeb",  # T5 attention batch matmul
    "torch/softmax_cast_tir_logical_not_full_where_multiply_287e0cfd891e4756",  # T5 softmax
    "torch/mean_add_tir_rsqrt_multiply_multiply_8c0a381fecbf5f6a",  # T5 RMS norm
]
V2_CHECKPOINT = "graphsage-v2-networks.ckpt"  # an evaluation checkpoint: three networks held out
# part 5: four families of graphsage-h100.ckpt's test side, first to last as device time allows
# (dense last: it has a pair on the H100, the others have none)
GPU_WORKLOADS = [
    "conv2d/h28_w28_ci128_co128_k3_stride1_pad1",
    "batch_matmul/b12_m197_n197_k64",
    "depthwise_conv2d/h14_w14_c384_k3_stride1_pad1",
    "dense/m197_n2304_k768",
]
GPU_CHECKPOINT = "graphsage-h100.ckpt"  # shipped, with its pretrained XGBModel beside it
TUNERS = ["bo", "ms-xgb-pretrained", "ms-default", "ms-ours", "random"]
# an evaluation checkpoint (bench/evaluation_models.py): its test side holds SHAPES_WORKLOADS out
SHAPES_CHECKPOINT = "graphsage.ckpt"
LONG_TUNERS = ["ms-xgb-pretrained", "ms-default"]  # the baselines that the targets need at 256


def part(name, workloads, checkpoint, args, target, measurer) -> None:
    from datagen.grid import read_json, write_json
    from datagen.suites import resolve
    from datagen.tvm_env import describe_target
    from tuning.compare import RESULTS_FILE, run_curves
    from tuning.report import format_summary, plot_curves, summarize
    from tuning.runs import model_ids, same_models
    from costmodel.pretrained_xgb import pretrained_xgb_file
    from tuning.tuner import TUNERS as REGISTRY
    from tuning.tuner import SearchInputs, load_predictor

    predictor = load_predictor(checkpoint, target=target)
    held_out = set(predictor.meta["sides"]["test"])
    unseen = [w for w in workloads if w in held_out]
    if unseen != workloads:
        raise SystemExit(f"{name}: {sorted(set(workloads) - held_out)} were not held out by "
                         f"{checkpoint}")
    out = os.path.join(args.out, name)
    tuners = args.tuners + (["ytopt"] if args.ytopt else [])
    trials = max(args.trials)
    tuner_trials = {t: trials if t in args.long_tuners else min(args.trials) for t in tuners}
    xgb = pretrained_xgb_file(checkpoint, predictor.meta,
                              os.path.join(out, "cache"))
    inputs = SearchInputs(predictor, pretrained_xgb=xgb)
    results, remeasured = run_curves(
        resolve(workloads), tuners, trials, args.seeds, out, target, measurer,
        inputs, args.trials_per_iter,
        remeasure_budgets=args.trials, tuner_trials=tuner_trials, finished_only=args.report,
        jobs=args.jobs)
    budgets = sorted({16, 32, *args.trials})
    done = read_json(os.path.join(out, RESULTS_FILE))
    summary = summarize(results, remeasured, budgets, trials, tuner_trials,
                        walls=done.get("wall_s"))
    summary["measured_on"] = sorted({describe_target(t) for per_seed in
                                     done["measured_on"].values() for t in per_seed})
    summary["devices"] = sorted({d for per_seed in done["devices"].values() for d in per_seed
                                 if d is not None})
    summary["pair_seeds"] = done["pair_seeds"]
    summary["models"] = done["models"]
    write_json(os.path.join(out, "summary.json"), summary, indent=1)
    plot_curves(results, os.path.join(out, "curves.png"))
    print(f"== {name}: {len(results)} of {len(workloads)} workloads, seeds {args.seeds}, "
          f"{args.trials_per_iter} trials per round, measured on {summary['measured_on']}"
          + (f" ({', '.join(summary['devices'])})" if summary["devices"] else "") + " ==")
    if not same_models(done["models"], model_ids(inputs)):
        made = ", ".join(f"{m['file']} ({m['sha256'][:12]})" for ids in done["models"].values()
                         for m in (ids if isinstance(ids, list) else [ids]))
        print(f"(made with {made}: not the models of {checkpoint} now)")
    print(format_summary(summary, {t: REGISTRY.get(t).description for t in tuners}))
    print()


def end_to_end(args, target, measurer) -> None:
    import numpy as np
    import torch
    from tvm import relax
    from tvm.s_tir import meta_schedule as ms

    from datagen.grid import Grid, write_json
    from datagen.measure import time_networks
    from datagen.torch_import import relax_module
    from datagen.tvm_env import target_json
    from tuning.tuner import SearchInputs, compile_network, load_predictor, tune_network

    class SmallCNN(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.c1 = torch.nn.Conv2d(3, 32, 3, padding=1)
            self.c2 = torch.nn.Conv2d(32, 64, 3, padding=1, stride=2)
            self.fc = torch.nn.Linear(64, 10)

        def forward(self, x):
            x = torch.relu(self.c2(torch.relu(self.c1(x))))
            return self.fc(x.mean(dim=(2, 3)))

    torch.manual_seed(0)
    x = torch.randn(1, 3, 32, 32)
    mod = relax_module(torch.export.export(SmallCNN().eval(), (x,)), target)
    predictor = load_predictor(None)

    def latency(exe) -> float:  # timed with the runner's threads, as the tasks were
        return time_networks({"network": exe}, [x.numpy()], target, 1, protocol={
            "number": 10, "repeat": 5, "min_repeat_ms": 50},
            num_threads=measurer.num_threads)["network"][0]

    out = os.path.join(args.out, "tuning-network")
    # a run tuned with another budget or target is refused, not read back
    grid = Grid(out, {"trials": args.network_trials, "trials_per_iter": args.trials_per_iter,
                      "target": target_json(target)})
    with target:
        untuned = relax.build(mod, target=target)
    rows = {"untuned": [latency(untuned)]}
    for seed in args.seeds:
        for tuner in ("ms-default", "bo"):
            done = os.path.join("runs", tuner, f"seed{seed}", "done")
            work = os.path.dirname(grid.path(done))
            # tuned before (the cell, or the empty marker of a run made before cells held
            # JSON): rebuilt from its database
            if os.path.exists(grid.path(done)):
                db = ms.database.JSONDatabase(work_dir=work)
            else:
                shutil.rmtree(work, ignore_errors=True)
                start = time.perf_counter()
                db = tune_network(mod, None, target, tuner, args.network_trials, work,
                                  measurer, SearchInputs(predictor, seed),
                                  args.trials_per_iter)
                grid.write(done, {"wall_s": time.perf_counter() - start})
            rows.setdefault(tuner, []).append(latency(compile_network(db, mod, target)))
    print(f"== end to end: small CNN, {args.network_trials} trials in total, seeds "
          f"{args.seeds} ==")
    for name, secs in rows.items():
        each = " ".join(f"{s * 1e6:.1f}" for s in secs)
        print(f"{name:<11}{np.median(secs) * 1e6:>10.1f} us median   ({each})")
    write_json(os.path.join(out, "summary.json"),
               {"trials": args.network_trials, "seeds": args.seeds,
                "latency_us": {n: [s * 1e6 for s in secs] for n, secs in rows.items()}},
               indent=1)


def main() -> None:
    import network_tuning  # a sibling script

    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    parser.add_argument("--trials-per-iter", type=int, default=8)
    parser.add_argument("--trials", nargs="+", type=int, default=[64],
                        help="budgets: each run goes to the largest; the finalists of each "
                        "are re-measured (64 256: both)")
    parser.add_argument("--long-tuners", nargs="*", default=LONG_TUNERS,
                        choices=TUNERS + ["ytopt"],
                        help="the tuners that run to the largest budget; the others stop at "
                        "the smallest (default: %(default)s)")
    parser.add_argument("--ytopt", action="store_true", help="also the ytopt-style tuner")
    parser.add_argument("--tuners", nargs="+", choices=TUNERS, default=TUNERS,
                        help="the tuners to compare (default: %(default)s)")
    parser.add_argument("--target", help="TVM target as JSON or a tag (default: this CPU); a "
                        "GPU's runs part gpu on this host's GPU")
    parser.add_argument("--report", action="store_true", help="tune nothing: summarise the "
                        "(workload, seed) pairs finished so far (parts shapes, family, v2 and "
                        "gpu; needs no GPU)")
    parser.add_argument("--family-checkpoint", help="a checkpoint trained with depthwise_conv2d "
                        "held out (part 2 is skipped without it)")
    parser.add_argument("--network-trials", type=int, default=96,
                        help="network: the small CNN's total budget")
    parser.add_argument("--networks", nargs="+", default=list(network_tuning.NETWORKS),
                        help="networks: catalogue networks to tune whole (default: %(default)s)")
    parser.add_argument("--network-budgets", nargs="+", type=int,
                        default=list(network_tuning.BUDGETS),
                        help="networks: total budgets, in trials per task")
    parser.add_argument("--network-tuners", nargs="+", choices=TUNERS + ["bo-learn", "bo-evo"],
                        default=list(network_tuning.TUNERS))
    parser.add_argument("--network-ours", nargs="+", default=["bo"],
                        help="networks: the tuners the summary pairs with every other tuner "
                        "(default: %(default)s)")
    parser.add_argument("--network-reach", type=int, metavar="B",
                        help="networks: instead of the pairs, race each of --network-ours at "
                        "the largest --network-budgets against ms-default at B trials per task "
                        "(e.g. 256)")
    parser.add_argument("--cold", action="store_true",
                        help="networks: every tuner measures its candidates cold (single runs, "
                        "the CPU caches flushed of each argument but the first, as a kernel "
                        "meets its weights inside a network), into OUT/tuning-networks-cold")
    parser.add_argument("--rounds", type=int, default=network_tuning.ROUNDS,
                        help="networks: interleaved measurement rounds of the compiled networks")
    parser.add_argument("--parts", nargs="+", default=["shapes", "family", "network"],
                        choices=["shapes", "family", "v2", "network", "networks", "gpu"],
                        help="shapes: held-out shapes (graphsage.ckpt); family: a held-out "
                        "family (--family-checkpoint); v2: held-out networks "
                        "(graphsage-v2-networks.ckpt); network: a CNN end to end; "
                        "networks: whole catalogue networks at two budgets; gpu: "
                        "held-out shapes on the GPU of --target (graphsage-h100.ckpt)")
    parser.add_argument("--jobs", type=int, default=1,
                        help="with a GPU --target: tune up to this many runs at once (the "
                        "tuners of a pair, then the next pairs'), each in its own process on "
                        "an equal slice of the cores, their measurements taking turns on the "
                        "GPU (default: one after another)")
    parser.add_argument("--out", default="bench/results")
    args = parser.parse_args()

    import evaluation_models  # a sibling script
    from costmodel import checkpoints
    from datagen.defaults import COLD_PROTOCOL
    from datagen.errors import UserError, output_folder
    from datagen.measure import Measurer
    from datagen.tvm_env import make_target

    try:
        output_folder(args.out, create=False)  # before any tuning
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    target = make_target(args.target)
    on_gpu = target.kind.name != "llvm"
    if on_gpu and set(args.parts) != {"gpu"}:
        raise SystemExit("error: with a GPU --target only --parts gpu runs (the other parts' "
                         "checkpoints learned this CPU)")
    if args.jobs < 1:
        raise SystemExit(f"error: --jobs must be at least 1, not {args.jobs}")
    if args.jobs > 1 and not on_gpu:
        raise SystemExit("error: --jobs above 1 needs a GPU --target: tuners side by side on "
                         "this CPU would build and search on the cores they measure on")
    if "gpu" in args.parts and not on_gpu:
        raise SystemExit("error: --parts gpu tunes on a GPU: give its --target "
                         "(nvidia/nvidia-h100) and run on that GPU's host")
    if args.cold and set(args.parts) != {"networks"}:
        raise SystemExit("error: --cold is for --parts networks alone (the other parts' pairs "
                         "were all measured hot)")
    if "networks" in args.parts and not args.report:
        try:
            network_tuning.check_networks(args.networks, args.network_budgets, args.rounds,
                                          args.network_reach)
        except UserError as err:
            raise SystemExit(f"error: {err}") from None
    try:  # a report measures nothing, so it runs anywhere (a GPU part's pairs on a laptop)
        # side by side (--jobs above 1), the runs build in their own processes and the pairs'
        # finalists with a measurer of their own: this one builds only for a pair left to tune
        # one run at a time, so its build workers start then rather than beside the first runs
        measurer = None if args.report else Measurer(
            target, COLD_PROTOCOL if args.cold else None, start_builder=args.jobs == 1)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    try:
        if "gpu" in args.parts:
            part("tuning-gpu", GPU_WORKLOADS, checkpoints.path(GPU_CHECKPOINT), args, target,
                 measurer)
        if "shapes" in args.parts:
            part("tuning-shapes", SHAPES_WORKLOADS, evaluation_models.path(SHAPES_CHECKPOINT),
                 args, target, measurer)
        if "family" in args.parts and args.family_checkpoint:
            part("tuning-family", FAMILY_WORKLOADS, args.family_checkpoint, args, target,
                 measurer)
        if "v2" in args.parts:
            part("tuning-v2-networks", V2_WORKLOADS, evaluation_models.path(V2_CHECKPOINT),
                 args, target, measurer)
        if "network" in args.parts and not args.report:
            end_to_end(args, target, measurer)
        if "networks" in args.parts:
            network_tuning.networks_part(args, target, measurer)
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    finally:
        if measurer is not None:
            measurer.close()


if __name__ == "__main__":
    main()
