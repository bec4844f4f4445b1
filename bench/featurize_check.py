"""Check: the CPU lowering shortcut of `feature_passes` gives the same graphs as the full one.

For every measured record of a dataset (or --per-workload of each workload), replays the trace,
lowers it with TVM's full pipeline and with the target's (`feature_passes(target)`), and
compares the graphs array by array. Prints the count that differ (expected 0) and the lowering
time of each pipeline.

    python bench/featurize_check.py [--dataset data/llvm-full] [--per-workload N]
"""

from __future__ import annotations

import argparse
import time


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--dataset", default="data/llvm-full")
    parser.add_argument("--per-workload", type=int, default=0, help="0: every record")
    args = parser.parse_args()

    import numpy as np
    import tvm
    from tqdm import tqdm
    from tvm import tirx

    from costmodel.featurize import build_graph, feature_passes
    from datagen.records import read_records
    from datagen.sampler import replay
    from datagen.tvm_env import make_target

    frame = read_records(args.dataset)
    frame = frame[frame.status == "ok"]
    if args.per_workload:
        frame = frame.groupby("workload_key", group_keys=False).head(args.per_workload)
    target = make_target(frame.target.iloc[0])
    pipelines = {"full": feature_passes(None), "target": feature_passes(target)}
    seconds = dict.fromkeys(pipelines, 0.0)
    workloads: dict[str, object] = {}
    differ = []
    for row in tqdm(frame.itertuples(), total=len(frame), desc="records"):
        if row.workload_ir not in workloads:
            workloads[row.workload_ir] = tvm.ir.load_json(row.workload_ir)
        mod = replay(workloads[row.workload_ir], row.trace).mod
        graphs = {}
        for name, passes in pipelines.items():
            start = time.perf_counter()
            with target:
                lowered = tvm.ir.transform.Sequential(passes)(
                    tirx.transform.BindTarget(target)(mod))
            seconds[name] += time.perf_counter() - start
            graphs[name] = build_graph(lowered)
        a, b = graphs.values()  # every array of the graph, those of its other views too
        if not all(np.array_equal(v, getattr(b, k)) for k, v in vars(a).items()):
            differ.append(row.workload_key)
    n = len(frame)
    print(f"{n} records of {frame.workload_key.nunique()} workloads, target {target.kind.name}")
    print(f"lowering: full {seconds['full'] / n * 1e3:.2f} ms, "
          f"target's {seconds['target'] / n * 1e3:.2f} ms per record")
    print(f"graphs that differ: {len(differ)}" + (f" ({sorted(set(differ))})" if differ else ""))
    raise SystemExit(1 if differ else 0)


if __name__ == "__main__":
    main()
