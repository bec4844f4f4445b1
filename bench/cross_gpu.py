"""Benchmark: one GPU's cost model on another GPU's measurements of the same schedules.

`datagen pack --replay data/cuda-h100` builds again the schedules that the H100 measured of
some workloads, to be timed on another GPU of the same target (an H200 runs the
`nvidia/nvidia-h100` kernels): the same programs with two devices' labels. This script joins
the two datasets on (workload, schedule) and scores, on the records both hold:

- how far the labels agree: per workload, Kendall tau between the two GPUs' latencies, the
  top-1 score of one GPU's fastest schedule on the other (TenSet's: the best latency over the
  latency of the pick), and the geometric mean of the latency ratio;
- the checkpoint zero-shot (it never learned either GPU's records of the held-out workloads
  of its split): as shipped (blended with its tree companion) and the network alone, ranked
  against each GPU's labels, with `costmodel evaluate`'s metrics (Kendall tau and top-1 per
  workload, averaged; and each workload's own).

Adapting the checkpoint to the other GPU on a few of its records is `bench/transfer.py`'s work.

    python bench/cross_gpu.py --dataset data/cuda-h200 [--reference data/cuda-h100] \\
        [--checkpoint checkpoints/graphsage-h100.ckpt] [--out bench/results/cuda-h200/cross-gpu]

Writes --out/summary.json.
"""

from __future__ import annotations

import argparse
import json
import os

import numpy as np
import pandas as pd

METRICS = ("kendall_tau", "top1_score")


def joined(dataset: str, reference: str) -> pd.DataFrame:
    """The ok records of `dataset` whose schedule `reference` measured too, with the reference's
    latency beside (`reference_latency`).

    Raises:
        UserError: no schedule in common, or the two datasets' records name one device.
    """
    from costmodel.splits import usable
    from datagen.errors import UserError
    from datagen.records import read_records

    mine, _ = usable(read_records(dataset))
    theirs, _ = usable(read_records(reference))
    if set(mine.device) & set(theirs.device):
        raise UserError(f"{dataset} and {reference} hold records of one device: compare two "
                        "GPUs' datasets")
    theirs = theirs[["workload_key", "trace_hash", "latency_median"]].rename(
        columns={"latency_median": "reference_latency"})
    frame = mine.merge(theirs, on=["workload_key", "trace_hash"], how="inner")
    if frame.empty:
        raise UserError(f"{dataset} and {reference} have no measured schedule in common: "
                        "pack the other with datagen pack --replay")
    return frame.reset_index(drop=True)


def agreement(frame: pd.DataFrame) -> dict:
    """The two GPUs' labels of the same schedules against each other, workload by workload."""
    ours = frame.latency_median.to_numpy(float)
    theirs = frame.reference_latency.to_numpy(float)
    ratio = pd.Series(np.log(ours / theirs)).groupby(frame.workload_key.to_numpy()).mean()
    return {"reference_ranks_device": _metrics(frame, "latency_median", theirs),
            "latency_ratio_geomean": float(np.exp(ratio.mean())),
            "latency_ratio_per_workload": {k: float(np.exp(v)) for k, v in ratio.items()}}


def _metrics(frame: pd.DataFrame, column: str, predicted: np.ndarray) -> dict:
    """METRICS of `predicted` against the latencies `column`, overall and per workload."""
    from costmodel.metrics import all_metrics

    def scored(rows):
        part = frame.iloc[rows]
        found = all_metrics(part.workload_key, part[column], predicted[rows],
                            part.workload_weight)
        return {k: found[k] for k in METRICS}

    return {**scored(np.arange(len(frame))),
            "per_workload": {key: scored(rows) for key, rows in
                             sorted(frame.groupby("workload_key").indices.items())}}


def model_scores(frame: pd.DataFrame, checkpoint: str, cache_dir: str | None) -> dict:
    """The checkpoint as shipped and its network alone, against each GPU's labels."""
    from costmodel.predictor import CostModelPredictor

    out = {}
    for name, blend in (("shipped", True), ("network", False)):
        predictor = CostModelPredictor.load(checkpoint, cache_dir=cache_dir, blend=blend)
        predicted = np.asarray(predictor.predict_records(frame), float)
        out[name] = {labels: _metrics(frame, column, predicted)
                     for labels, column in (("device", "latency_median"),
                                            ("reference", "reference_latency"))}
        out[name]["model"] = repr(predictor)
    return out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dataset", required=True, help="the other GPU's records")
    parser.add_argument("--reference", default="data/cuda-h100",
                        help="the records the checkpoint's GPU measured")
    parser.add_argument("--checkpoint", default=None,
                        help="default: the shipped GPU model (graphsage-h100.ckpt)")
    parser.add_argument("--cache-dir", default=".cache/features")
    parser.add_argument("--out", default="bench/results/cuda-h200/cross-gpu")
    args = parser.parse_args(argv)

    from costmodel import checkpoints
    from datagen.errors import UserError, output_folder
    from datagen.grid import write_json

    try:
        output_folder(args.out)
        frame = joined(args.dataset, args.reference)
        checkpoint = args.checkpoint or checkpoints.path("graphsage-h100.ckpt")
        summary = {"dataset": args.dataset, "reference": args.reference,
                   "checkpoint": os.path.basename(checkpoint), "records": len(frame),
                   "workloads": int(frame.workload_key.nunique()),
                   "devices": sorted({json.loads(d)["model"] for d in frame.device}),
                   **agreement(frame), "models": model_scores(frame, checkpoint,
                                                              args.cache_dir)}
    except UserError as err:
        raise SystemExit(f"error: {err}") from None
    write_json(os.path.join(args.out, "summary.json"), summary)
    print(f"{summary['records']} schedules of {summary['workloads']} workloads measured on "
          f"both; latency ratio (geometric mean) {summary['latency_ratio_geomean']:.3f}")
    ranks = summary["reference_ranks_device"]
    print(f"the reference's labels rank this device's: tau {ranks['kendall_tau']:.3f}, "
          f"top-1 {ranks['top1_score']:.3f}")
    for name, scored in summary["models"].items():
        print(f"{name:8s} on this device: tau {scored['device']['kendall_tau']:.3f}, top-1 "
              f"{scored['device']['top1_score']:.3f}; on the reference: tau "
              f"{scored['reference']['kendall_tau']:.3f}, top-1 "
              f"{scored['reference']['top1_score']:.3f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
