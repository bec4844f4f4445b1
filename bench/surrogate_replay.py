"""Benchmark: which share of a tuning loss is the model's? bo's surrogates replayed offline.

Gathers every schedule that the tuners of a `tune compare` run folder measured for each
workload (all tuners and seeds; a schedule measured twice keeps the median of its latencies),
scores them once with a checkpoint, and then, many times over, hands each surrogate `n` of them
at random as "measured so far" and asks it to rank the rest, as bo's acquisition ranks its pool:

- `prior`: the predictor's blended log-latency alone (bo before its first measurement);
- `prior+gp`: bo's surrogate (`tuning.search.PriorGP`: the prior plus a GP on its residual);
- `mixture+gp`: bo-mix's (`tuning.search.PriorMix`: the network and each tree companion
  reweighted by how well each ranks the `n` measurements, plus the GP);
- `continued`: the prior with its XGBModel's booster trained on for `--rounds` more rounds on the
  `n` measurements (MetaSchedule's own pack-sum loss and labels: what ms-xgb-pretrained's
  retraining learns from the run), and `continued+gp` the same with the GP: bo-learn's
  surrogate (`tuning.search.PriorLearn`, which trains from 8 measurements on).

Per workload and `n` it prints, as geometric means over `--repeats` draws: the slowdown of the
surrogate's first pick over the fastest of the rest (1 is perfect), of the best of its first
16 picks (a round of bo), and its Kendall tau on the rest. The schedules are the tuners' picks,
not a random sample of the space, so these rank the good end of it. Writes --out/summary.json.

    python bench/surrogate_replay.py --run bench/results/ood/tuning-v3-ens2-xgb-mlp-evo \\
        --checkpoint checkpoints/graphsage-v3.ckpt --out bench/results/ood/surrogate-replay
"""

from __future__ import annotations

import argparse
import glob
import json
import math
import os
import sys

import numpy as np

SURROGATE_NAMES = ("prior", "prior+gp", "mixture+gp", "continued", "continued+gp")
ROUND = 16  # candidates bo measures a round


def measured_schedules(run: str) -> dict[str, tuple]:
    """{workload folder name: (mod, traces, median latencies)} of a run folder's databases."""
    from tvm.s_tir.meta_schedule.database import JSONDatabase

    from datagen.errors import UserError
    from datagen.measure import run_latency
    from tuning.tuner import RECORDS_FILE

    out = {}
    for folder in sorted(glob.glob(os.path.join(run, "runs", "*"))):
        mod, latencies = None, {}
        for workload_file in sorted(glob.glob(os.path.join(folder, "*", "seed*",
                                                           "database_workload.json"))):
            work_dir = os.path.dirname(workload_file)
            records = os.path.join(work_dir, RECORDS_FILE)
            if not os.path.exists(records):
                continue
            if mod is None:
                db = JSONDatabase(path_workload=workload_file, path_tuning_record=records)
                mod = next((r.workload.mod for r in db.get_all_tuning_records()), None)
            with open(records) as f:
                for line in f:
                    if line.strip():
                        trace, run_secs = json.loads(line)[1][:2]
                        latency = run_latency(run_secs)
                        if latency is not None:
                            latencies.setdefault(json.dumps(trace), []).append(latency)
        if mod is not None and len(latencies) > ROUND:
            traces = sorted(latencies)
            out[os.path.basename(folder)] = (mod, traces,
                                             np.array([np.median(latencies[t]) for t in traces]))
    if not out:
        raise UserError(f"{run}: no workload with more than {ROUND} measured schedules under "
                        "runs/; name a `tune compare` --out folder whose runs are here")
    return out


def score(predictor, mod, traces: list[str]) -> dict:
    """The network's log-latencies, the companions' throughputs (a column each), the
    embeddings and per-store rows of the schedules, and the blended prior (bo's)."""
    from datagen.sampler import replay

    logs, throughput, emb, stores = predictor.score_parts([replay(mod, t) for t in traces],
                                                          stores=True)
    columns = None if throughput is None else \
        np.asarray(throughput, float).reshape(len(logs), -1)
    prior = logs if columns is None else predictor.companion.blend(
        logs, throughput, np.zeros(len(logs)))
    return {"logs": logs, "columns": columns, "emb": emb.astype(np.float64),
            "stores": stores, "prior": np.asarray(prior, float)}


def rank_scores(log_latency: np.ndarray, predicted: np.ndarray) -> tuple[float, float, float]:
    """(first pick's slowdown over the fastest, the best of the first ROUND picks' slowdown,
    Kendall tau) of `predicted` log-latencies against measured ones."""
    from tuning.search import kendall

    order = np.argsort(predicted, kind="stable")
    best = log_latency.min()
    return (math.exp(log_latency[order[0]] - best),
            math.exp(log_latency[order[:ROUND]].min() - best), kendall(predicted, log_latency))


def replay_workload(predictor, scored: dict, log_latency: np.ndarray, measured: int,
                    repeats: int, rounds: int, seed: int = 0) -> dict[str, list[float]]:
    """{surrogate: [first-pick slowdown, round's slowdown, tau], geometric means (tau: mean)
    over `repeats` random draws of `measured` schedules}."""
    from tuning.search import PriorGP, PriorLearn, PriorMix, scored_rows

    rng = np.random.default_rng(seed)
    emb, prior = scored["emb"], scored["prior"]
    parts = np.stack([scored["logs"]] + ([] if scored["columns"] is None else
                                         list(-scored["columns"].T)), axis=1)
    learns = PriorLearn.learns(predictor)
    if learns:  # bo-learn's candidates: the blend's parts with the trees' own throughputs
        candidates = scored_rows(scored["logs"], scored["columns"], emb, scored["stores"])[0]
    rows: dict[str, list] = {}
    for _ in range(repeats):
        m = np.sort(rng.permutation(len(log_latency))[:measured])
        rest = np.setdiff1d(np.arange(len(log_latency)), m)
        y = log_latency[m]

        def with_gp(p: np.ndarray) -> np.ndarray:
            gp = PriorGP(predictor, seed)
            gp.fit(list(emb), list(emb[m]), p[m], y)
            return gp.posterior(list(emb[rest]), p[rest])[0]

        mixture = PriorMix(predictor, seed)
        mixture.seen_parts = list(parts)
        mixture.fit(list(emb), list(emb[m]), parts[m], y)
        predicted = {"prior": prior[rest], "prior+gp": with_gp(prior),
                     "mixture+gp": mixture.posterior(list(emb[rest]), parts[rest])[0]}
        if learns:  # bo-learn's surrogate, its XGBModel trained on the `measured`
            learn = PriorLearn(predictor, seed, rounds=rounds)
            learn.fit(candidates, [candidates[i] for i in m], None, y)
            rest_x = [candidates[i] for i in rest]
            predicted.update({"continued": learn.prior(learn.parts(rest_x)),
                              "continued+gp": learn.posterior(rest_x, None)[0]})
        for name, p in predicted.items():
            rows.setdefault(name, []).append(rank_scores(log_latency[rest], p))
    return {name: [float(np.exp(np.mean(np.log([r[0] for r in v])))),
                   float(np.exp(np.mean(np.log([r[1] for r in v])))),
                   float(np.mean([r[2] for r in v]))] for name, v in rows.items()}


def geomeans(workloads: dict, measured: list[int]) -> dict:
    """{n: {surrogate: [first-pick slowdown, round's slowdown]}}, geometric means over the
    workloads that scored it."""
    out = {}
    for n in map(str, measured):
        rows = [w[n] for w in workloads.values() if n in w]
        out[n] = {s: [float(np.exp(np.mean(np.log([r[s][i] for r in rows])))) for i in (0, 1)]
                  for s in SURROGATE_NAMES if rows and all(s in r for r in rows)}
    return out


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--run", required=True, help="a `tune compare` --out folder with runs/")
    parser.add_argument("--checkpoint", required=True, help="the checkpoint bo tuned with")
    parser.add_argument("--measured", type=int, nargs="+", default=[16, 32],
                        help="schedules each surrogate is fitted on")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=10,
                        help="boosting rounds the XGBModel trains on for `continued`")
    parser.add_argument("--out", required=True)
    args = parser.parse_args()
    from datagen.errors import output_folder, run_command
    from datagen.grid import write_json

    def run(args) -> int:
        import warnings

        from costmodel.predictor import CostModelPredictor

        output_folder(args.out)
        predictor = CostModelPredictor.load(args.checkpoint)
        summary = {"run": args.run, "checkpoint": os.path.basename(args.checkpoint),
                   "repeats": args.repeats, "rounds": args.rounds, "workloads": {}}
        for name, (mod, traces, latencies) in measured_schedules(args.run).items():
            scored = score(predictor, mod, traces)
            log_latency = np.log(latencies)
            per = summary["workloads"][name] = {"schedules": len(traces)}
            for n in args.measured:
                if n >= len(traces) - ROUND:
                    continue
                with warnings.catch_warnings():  # the GP's hyperparameters at a bound
                    warnings.simplefilter("ignore")
                    per[str(n)] = replay_workload(predictor, scored, log_latency, n,
                                                  args.repeats, args.rounds)
                print(f"{name}: {len(traces)} schedules, {n} measured "
                      "(first pick's slowdown / a round's / tau)")
                for surrogate, (first, best16, tau) in per[str(n)].items():
                    print(f"  {surrogate:13s} {first:6.3f} {best16:6.3f} {tau:6.3f}")
        summary["geomean"] = geomeans(summary["workloads"], args.measured)
        write_json(os.path.join(args.out, "summary.json"), summary, indent=1)
        print(f"summary.json in {args.out}")
        return 0

    return run_command("surrogate_replay", run, args)


if __name__ == "__main__":
    sys.exit(main())
