"""Which records train, validate and test: filtering, the splits, and shares of records.

Splits hold out whole workloads, so the test side is programs the model never saw:
- "shapes": a `test_fraction` of the workloads of every family (held-out shapes);
- "family": every workload of the `test_families` (held-out operator families);
- "network": every workload of the `test_networks` (held-out networks); a workload that also
  occurs in another network is trained on, so it never counts as held out;
and three out of distribution, which hold out what a user brings rather than near relatives
of the training tasks:
- "novel-shapes": a `test_fraction` of the workloads, none of whose buffer shapes (of rank 2
  or more: a 768-vector bias is everywhere) occurs in any training workload;
- "unseen-family": every workload of a family no training workload has (`test_families`,
  default the generator's `UNSEEN_FAMILIES` that the dataset holds);
- "cross-suite": every workload of another dataset of the same target (`test_dataset`, say
  the hand-written `full` suite beside the network tasks, or the reverse).
A `val_fraction` of the remaining training workloads validates; in the three splits out of
distribution it is held out the way the test side is (whole shape groups, whole families), so
that a model chosen on validation is chosen out of distribution too. Training
(`costmodel.data_module`) and evaluation (`costmodel.evaluate`) draw the same sides from these.
"""

from __future__ import annotations

import os

import numpy as np
import pandas as pd

from datagen.errors import UserError
from datagen.measure import OK
from datagen.tvm_env import describe_target

SPLITS = ("shapes", "family", "network", "novel-shapes", "unseen-family", "cross-suite", "all")
OUT_OF_DISTRIBUTION = ("novel-shapes", "unseen-family", "cross-suite")
SUITE_COLUMN = "suite"  # cross-suite: "test" for the records of `test_dataset`
RECORD_COLUMNS = ["workload_key", "family", "network", "workload_ir", "trace", "trace_hash",
                  "status", "latency_median", "latency_cv", "latencies", "workload_weight",
                  "target"]
NETWORK_SEPARATOR = ","  # a workload shared by several networks lists them all
MIN_PER_WORKLOAD = 2  # a share keeps this many records of a workload: rank pairs need two


def usable(frame: pd.DataFrame) -> tuple[pd.DataFrame, int]:
    """Records fit to learn from (ok, finite positive latency) and how many were dropped."""
    lat = frame.latency_median.astype(float)
    keep = (frame.status == OK) & np.isfinite(lat) & (lat > 0)
    return frame[keep].reset_index(drop=True), int((~keep).sum())


def check_one_target(frame: pd.DataFrame, dataset: str) -> None:
    """A model learns one target's latencies: refuse records measured on several.

    Raises:
        UserError: the records of `frame` have more than one `target`.
    """
    targets = sorted(frame.target.unique())
    if len(targets) > 1:
        names = ", ".join(sorted({describe_target(t) for t in targets}))
        raise UserError(f"{dataset} mixes {len(targets)} targets ({names}); train on one target: "
                        "collect each into its own folder")


def record_networks(network) -> list[str]:
    """The networks one record's `network` cell lists (NETWORK_SEPARATOR between them)."""
    return [n for n in str(network or "").split(NETWORK_SEPARATOR) if n]


def networks_of(frame: pd.DataFrame) -> dict[str, set[str]]:
    """Every network each workload key occurs in."""
    out: dict[str, set[str]] = {}
    for key, network in zip(frame.workload_key, frame.network):
        out.setdefault(key, set()).update(record_networks(network))
    return out


def buffer_shapes(frame: pd.DataFrame) -> dict[str, frozenset]:
    """Each workload's argument buffer shapes of rank 2 or more, from its stored IR."""
    import tvm
    from tvm.s_tir.meta_schedule.arg_info import ArgInfo

    first = frame.drop_duplicates("workload_key")
    out = {}
    for key, ir in zip(first.workload_key, first.workload_ir):
        args = ArgInfo.from_prim_func(tvm.ir.load_json(ir)["main"])
        out[str(key)] = frozenset(tuple(int(d) for d in a.shape) for a in args
                                  if len(a.shape) >= 2)
    return out


def shape_groups(shapes: dict[str, frozenset]) -> list[list[str]]:
    """The workloads in groups that share no buffer shape with one another (the connected
    components of "shares a shape"), each sorted, in key order."""
    parent = {k: k for k in shapes}

    def root(k):
        while parent[k] != k:
            parent[k] = parent[parent[k]]
            k = parent[k]
        return k

    owner: dict[tuple, str] = {}
    for key in sorted(shapes):
        for shape in shapes[key]:
            if shape in owner:
                parent[root(key)] = root(owner[shape])
            else:
                owner[shape] = key
    groups: dict[str, list[str]] = {}
    for key in sorted(shapes):
        groups.setdefault(root(key), []).append(key)
    return sorted(groups.values())


def _take_groups(groups: list[list[str]], fraction: float, rng) -> list[str]:
    """Whole groups, in a seeded random order, until `fraction` of their workloads is
    reached; a group of more than half of them is never taken (it would be the side)."""
    total = sum(len(g) for g in groups)
    want = int(round(total * fraction))
    taken: list[str] = []
    for i in rng.permutation(len(groups)):
        if len(taken) >= want:
            break
        if len(groups[i]) <= total / 2:
            taken += groups[i]
    return sorted(taken)


def split_workloads(frame: pd.DataFrame, split: str, test_fraction: float,
                    test_families: list[str], val_fraction: float, seed: int,
                    test_networks: list[str] | None = None) -> dict[str, list[str]]:
    """Workload keys of the train, val and test sides; the three never share a key.

    `frame` holds the records of every side; for "cross-suite" its `SUITE_COLUMN` says which
    are the other dataset's ("test").

    Raises:
        UserError: unknown split, family or network, or a side left empty.
    """
    from datagen.workloads import UNSEEN_FAMILIES

    rng = np.random.default_rng(seed)
    families = frame.groupby("family").workload_key.unique()
    held_out_like_test = None  # how an out-of-distribution split draws validation
    if split == "network":
        nets = networks_of(frame)
        known = set().union(*nets.values()) if nets else set()
        unknown = sorted(set(test_networks or []) - known)
        if unknown or not test_networks:
            raise UserError(f"test_networks {unknown or test_networks or []} not in the dataset "
                            f"(networks: {', '.join(sorted(known)) or 'none'})")
        test = sorted(k for k, n in nets.items() if n and n <= set(test_networks))
    elif split == "shapes":
        test = []
        for fam in sorted(families.index):
            keys = sorted(families[fam])
            n = int(round(len(keys) * test_fraction)) if len(keys) > 1 else 0
            test += [str(k) for k in rng.permutation(keys)[:n]]
    elif split in ("family", "unseen-family"):
        if split == "unseen-family" and not test_families:
            test_families = sorted(set(UNSEEN_FAMILIES) & set(families.index))
            if not test_families:
                raise UserError(f"the dataset holds none of the unseen families "
                                f"({', '.join(UNSEEN_FAMILIES)}); collect them with 'datagen "
                                "collect unseen-families', or name --test-families")
        unknown = sorted(set(test_families) - set(families.index))
        if unknown or not test_families:
            raise UserError(f"test_families {unknown or test_families} not in the dataset "
                            f"(families: {', '.join(sorted(families.index))})")
        test = sorted(k for fam in test_families for k in families[fam])
        if split == "unseen-family":
            def held_out_like_test(rest):  # whole families validate
                fams = frame[frame.workload_key.isin(rest)].groupby("family").workload_key
                return _take_groups([sorted(map(str, v)) for _, v in
                                     sorted(fams.unique().items())], val_fraction, rng)
    elif split == "novel-shapes":
        shapes = buffer_shapes(frame)
        test = _take_groups(shape_groups(shapes), test_fraction, rng)

        def held_out_like_test(rest):  # whole shape groups of the rest validate
            return _take_groups(shape_groups({k: shapes[k] for k in rest}), val_fraction, rng)
    elif split == "cross-suite":
        if SUITE_COLUMN not in frame:
            raise UserError("the cross-suite split tests on another dataset: name it "
                            "(test_dataset, --test-dataset)")
        theirs = frame[SUITE_COLUMN].to_numpy() == "test"
        test = sorted(set(map(str, frame.workload_key[theirs])))
        mine = sorted(set(map(str, frame.workload_key[~theirs])) - set(test))
        shapes = buffer_shapes(frame[frame.workload_key.isin(mine)])

        def held_out_like_test(rest):
            return _take_groups(shape_groups({k: shapes[k] for k in rest}), val_fraction, rng)
    elif split == "all":  # the model that ships: every workload trains or validates
        test = []
    else:
        raise UserError(f"unknown split {split!r}; choose one of {', '.join(SPLITS)}")
    rest = sorted(set(frame.workload_key) - set(test))
    if held_out_like_test is not None and val_fraction > 0:
        val = held_out_like_test(rest)
    else:
        n_val = int(round(len(rest) * val_fraction))
        val = [str(k) for k in rng.permutation(rest)[:n_val]]
    sides = {"train": sorted(set(rest) - set(val)), "val": sorted(val), "test": sorted(test)}
    empty = [name for name, keys in sides.items()
             if not keys and (name != "val" or val_fraction > 0) and
             (name != "test" or split != "all")]
    if empty:
        raise UserError(f"split {split!r} leaves {', '.join(empty)} empty "
                        f"({frame.workload_key.nunique()} workloads); change the fractions "
                        "or collect more workloads")
    return sides


def with_test_dataset(frame: pd.DataFrame, test_dataset: str, dataset: str) -> pd.DataFrame:
    """`frame` (the usable records of `dataset`) and those of `test_dataset`, marked
    (`SUITE_COLUMN`), for the cross-suite split.

    Raises:
        UserError: `test_dataset` has no usable record, or was measured on another target.
    """
    from datagen.records import read_records

    other, _ = usable(read_records(test_dataset, RECORD_COLUMNS))
    if other.empty:
        raise UserError(f"test_dataset {test_dataset} has no successfully measured records")
    check_one_target(other, test_dataset)
    if other.target.iloc[0] != frame.target.iloc[0]:
        raise UserError(f"test_dataset {test_dataset} was measured on "
                        f"{describe_target(other.target.iloc[0])} and {dataset} on "
                        f"{describe_target(frame.target.iloc[0])}: the cross-suite split "
                        "compares suites on one target")
    return pd.concat([frame.assign(**{SUITE_COLUMN: "train"}),
                      other.assign(**{SUITE_COLUMN: "test"})], ignore_index=True)


def training_records(checkpoint_path: str, meta: dict, dataset: str | None,
                     purpose: str) -> pd.DataFrame:
    """The usable records of a checkpoint's training workloads (`meta`: its description),
    from `dataset` or the folder the checkpoint names; `purpose` says who needs them. Of a
    checkpoint trained on a share of them, that share (`records_trained_on`).

    Raises:
        UserError: the dataset is missing or holds none of those workloads; the share cannot
            be drawn again.
    """
    from datagen.records import read_records

    folder = dataset or meta["dataset"]
    hint = ("pass --dataset DIR with the records it was trained on "
            f"({len(meta['sides']['train'])} training workloads)")
    if not os.path.isdir(folder):
        raise UserError(f"{purpose} trains on the records {checkpoint_path} was trained on, "
                        f"expected in {folder}, which does not exist; {hint}")
    frame, _ = usable(read_records(folder, RECORD_COLUMNS))
    frame = frame[frame.workload_key.isin(meta["sides"]["train"])].reset_index(drop=True)
    if frame.empty:
        raise UserError(f"{folder} has none of the training workloads of {checkpoint_path}; "
                        f"{hint}")
    return records_trained_on(frame, meta, checkpoint_path, folder)


def joint_entries(meta: dict) -> list[dict]:
    """The description of each `joint_dataset` folder that trained beside a checkpoint
    (`meta`: its description; one folder is stored as its description alone); [] for none."""
    joint = meta.get("joint") or []
    return [joint] if isinstance(joint, dict) else list(joint)


def head_for(meta: dict, target: str) -> int | None:
    """Which head of a checkpoint (`meta`: its description) trained on the records of `target`
    (a target's JSON) in a network with a head per target (`joint_head`): 0 for its own target,
    1 + the place of `target` among its `joint_dataset` folders' targets (the order in which
    `costmodel.data_module.joint_records` gave them heads); None if none trained on it. A target
    that differs from one of them only in its other attributes (`num-cores`: tuning on a host
    with more cores) is that one's, where a single one has its kind and CPU or GPU."""
    targets = [meta.get("target"),
               *dict.fromkeys(j.get("target") for j in joint_entries(meta))]
    if target in targets:
        return targets.index(target)
    same = [i for i, t in enumerate(targets) if describe_target(t) == describe_target(target)]
    return same[0] if len(same) == 1 else None


def leave_out_joint_workloads(frame: pd.DataFrame, meta: dict) -> tuple[pd.DataFrame, int]:
    """`frame`, records of another target than a checkpoint's own (`meta`: its description),
    less every workload that a `joint_dataset` folder of the checkpoint holds: a program it
    may have trained on, measured on another CPU, is no zero-shot test. Also how many
    workloads were left out.

    Raises:
        UserError: a joint folder that is not here to read.
    """
    from datagen.records import read_records

    keys: set = set()
    for entry in joint_entries(meta):
        folder = entry["dataset"]
        if not os.path.isdir(folder):
            raise UserError(f"{folder}, which trained the checkpoint beside its own dataset, is "
                            "not here: the programs it trained on cannot be left out of another "
                            "target's records; evaluate from the folder that holds it")
        keys |= set(read_records(folder, ["workload_key"]).workload_key)
    held = frame.workload_key.isin(keys)
    return frame[~held].reset_index(drop=True), int(frame.workload_key[held].nunique())


def records_trained_on(frame: pd.DataFrame, meta: dict, checkpoint_path: str,
                       folder: str) -> pd.DataFrame:
    """`frame`, the usable records of a checkpoint's training workloads in `folder`, cut to
    the share the checkpoint trained on (its `train_share` below 1: `share_of_records`, drawn
    again with its seed), so that a model fitted or scored beside it sees no more records.

    Raises:
        UserError: the share cannot be drawn again: `frame` does not hold as many records as
            the checkpoint drew it from (another dataset, or records added since).
    """
    share = meta.get("train_share") or {}
    if share.get("share", 1.0) >= 1:
        return frame
    if len(frame) != share.get("of"):
        raise UserError(f"{checkpoint_path} trained on a {share['share']:g} share of "
                        f"{share.get('of')} records of its training workloads, but {folder} has "
                        f"{len(frame)}, so the share cannot be drawn again; pass the dataset it "
                        "was trained on")
    return share_of_records(frame, share["share"], share["seed"])


def check_share(share: float, name: str = "train_share") -> None:
    """Raises: UserError unless 0 < share <= 1."""
    if not 0 < share <= 1:  # also refuses NaN
        raise UserError(f"{name} must be in (0, 1], not {share}")


def share_of_records(frame: pd.DataFrame, share: float, seed: int) -> pd.DataFrame:
    """A seeded random `share` of `frame`'s records, drawn within each workload
    (`share_rows`). Rows keep their order.

    Raises:
        UserError: `share` outside (0, 1].
    """
    return frame.iloc[share_rows(frame, share, seed)].reset_index(drop=True)


def share_rows(frame: pd.DataFrame, share: float, seed: int) -> np.ndarray:
    """A seeded random `share` of `frame`'s records, drawn within each workload.

    A workload of n records keeps round(share * n) of them, but at least MIN_PER_WORKLOAD
    (all n if it has fewer), so every workload still has pairs to rank. Each workload's records
    are shuffled once per seed and the share takes the first ones, so for one seed a smaller
    share is a subset of a larger one. The positions of its rows in `frame`, ascending.

    Raises:
        UserError: `share` outside (0, 1].
    """
    check_share(share)
    rng = np.random.default_rng(seed)
    keys = frame.workload_key.to_numpy()
    keep = []
    for key in sorted(set(keys)):
        rows = rng.permutation(np.flatnonzero(keys == key))
        n = max(MIN_PER_WORKLOAD, int(np.floor(share * len(rows) + 0.5)))
        keep.append(rows[:n])
    return np.sort(np.concatenate(keep)) if keep else np.zeros(0, int)

