"""The Parquet dataset as a LightningDataModule: featurisation, batching, joint datasets.

The sides are `costmodel.splits`' (whole workloads held out; three splits out of
distribution, validated the way they test). Normalisation (node, program
and target statistics) is fitted on the training split only and travels with the checkpoint;
with `normalize_per_workload` each record's target is its log-latency standardised within its
workload instead (the model then predicts a relative score, not a latency).
Training batches hold `per_workload` records of each of `workloads_per_batch` workloads, so
every batch has pairs of the same workload for the rank loss. With `train_share` below 1 the
model trains on a seeded random share of the training side's records (`share_of_records`);
validation and test keep all of theirs. With `joint_dataset`, the records of a second dataset
(usually another target's: CPU measurements beside a few GPU ones) train beside the training
side, one model learning both (MTL-TLP's recipe); they never validate or test, and their
targets are standardised with statistics of their own (`joint_normalization`), so two targets'
latencies never share a scale; the input statistics are fitted over both. With
`pseudo_labels` beside a `train_share`, the training side's other records train too, each with
a teacher's predicted latency instead of its measurement (self-training: their programs are
used, their runtimes are not).
"""

from __future__ import annotations

import json
import os

import lightning as L
import numpy as np
import pandas as pd
import torch

from costmodel import views as feature_views
from costmodel.normalization import Normalization
from costmodel.splits import (OUT_OF_DISTRIBUTION, RECORD_COLUMNS, buffer_shapes,
                              check_one_target, check_share, joint_entries, share_of_records,
                              share_rows, split_workloads, training_records, usable,
                              with_test_dataset)
from datagen.errors import UserError

JOINT_PREFIX = "joint:"  # workload keys of `joint_dataset` records, apart from the dataset's own

PSEUDO_COLUMNS = ("workload_key", "trace_hash", "latency")


def read_pseudo_labels(path: str) -> pd.DataFrame:
    """A table of predicted latencies (`PSEUDO_COLUMNS`, one row per workload and trace),
    read as data only.

    Raises:
        UserError: unreadable, columns missing, a (workload, trace) twice, or a latency that
            is not finite and positive.
    """
    try:
        table = pd.read_parquet(path, columns=list(PSEUDO_COLUMNS))
    except Exception as e:  # missing file, not Parquet, a column missing
        raise UserError(f"pseudo_labels {path} is no table of {', '.join(PSEUDO_COLUMNS)} "
                        f"({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})"
                        ) from None
    latency = pd.to_numeric(table.latency, errors="coerce").to_numpy(float)
    if not np.all(np.isfinite(latency) & (latency > 0)):
        raise UserError(f"pseudo_labels {path} has latencies that are not finite and positive")
    if table.duplicated(["workload_key", "trace_hash"]).any():
        raise UserError(f"pseudo_labels {path} labels a workload's trace twice")
    return table.assign(latency=latency).astype({"workload_key": str, "trace_hash": str})


def same_programs(frame: pd.DataFrame, unseen: pd.DataFrame,
                  hashes: dict[str, str] | None = None) -> pd.Series:
    """Whether each record of `frame` is of a program that a workload of `unseen` is, by the
    structural hash of its IRModule (`datagen.stats.task_hash`: names and keys aside), so that
    a task collected under another key (a generated `conv2d/...` that is a network's layer)
    is found too. `hashes` caches IR -> hash across calls."""
    from datagen.stats import task_hash

    hashes = {} if hashes is None else hashes
    if unseen.empty or frame.empty:
        return pd.Series(False, index=frame.index)

    def of(ir: str) -> str:
        if ir not in hashes:
            hashes[ir] = task_hash(ir)
        return hashes[ir]

    theirs = {of(ir) for ir in unseen.workload_ir.unique()}
    ours = {ir: of(ir) in theirs for ir in frame.workload_ir.unique()}
    return frame.workload_ir.map(ours).astype(bool)


def joint_records(joint_dataset: str | list[str], share: float, seed: int, target: str,
                  unseen: pd.DataFrame, dataset: str, split: str
                  ) -> tuple[pd.DataFrame, list[str], list[dict], int]:
    """The records of `joint_dataset` (a folder or a list of them) that train beside
    `dataset`'s training side, unfeaturised: each folder's usable records, a seeded `share` of
    each workload's (`share_of_records`), under workload keys of their own (`JOINT_PREFIX`,
    then the head for heads above 1), each naming its target's head (`head`: 1 + the target's
    place among the joint targets, in the order given) and its folder (`dataset`). Also the
    joint targets, a description of each folder (with the seed and the number of records the
    share was drawn from, `of`, so it can be drawn again) and how many records were unusable.

    In the splits out of distribution (`OUT_OF_DISTRIBUTION`) a joint workload that `split`
    would hold out is left out, whatever its target: the same program as a validation or
    held-out workload (`unseen`, their records; by key or by structural hash,
    `same_programs`), one sharing a buffer shape with them
    (novel-shapes), one of their families (unseen-family). Another CPU's measurements of a
    held-out program would teach the model that very program. Each folder's description
    counts them (`left_out`). In the other splits a folder of `target` itself may not hold
    a workload of `unseen` (by key or structural hash): the same measurements of a held-out
    program would train.

    Raises:
        UserError: a folder is given twice, has no usable record, mixes targets, holds
            workloads of `unseen` measured on `target` in a split in distribution (a leak), or
            holds only workloads the split holds out.
    """
    from datagen.records import read_records

    unseen_keys = set(map(str, unseen.workload_key))
    families = set(unseen.family) if split == "unseen-family" else set()
    shapes = set().union(*buffer_shapes(unseen).values()) \
        if split == "novel-shapes" and len(unseen) else set()

    hashes: dict[str, str] = {}  # workload IR -> structural hash, shared by the folders
    folders = [joint_dataset] if isinstance(joint_dataset, str) else list(joint_dataset)
    if len({os.path.realpath(f) for f in folders}) < len(folders):
        raise UserError(f"joint_dataset names a folder twice ({', '.join(folders)}); "
                        "give each dataset once")
    frames, targets, described, dropped = [], [], [], 0
    for folder in folders:
        frame, lost = usable(read_records(folder, RECORD_COLUMNS))
        if frame.empty:
            raise UserError(f"joint_dataset {folder} has no successfully measured "
                            "records to train on")
        check_one_target(frame, folder)
        if frame.target.iloc[0] == target and split not in OUT_OF_DISTRIBUTION:
            leaked = sorted(set(frame.workload_key[frame.workload_key.isin(unseen_keys)
                                                   | same_programs(frame, unseen, hashes)]))
            if leaked:
                raise UserError(f"joint_dataset {folder} holds {len(leaked)} "
                                f"validation or held-out workloads of {dataset} on the same "
                                f"target (e.g. {leaked[0]}); join another target's records or "
                                "use another split")
        dropped += lost
        left_out = 0
        if split in OUT_OF_DISTRIBUTION:
            held = (frame.workload_key.isin(unseen_keys) | frame.family.isin(families)
                    | same_programs(frame, unseen, hashes))
            if shapes:
                theirs = buffer_shapes(frame)
                held |= frame.workload_key.map(lambda key: bool(theirs[str(key)] & shapes))
            left_out = int(frame.workload_key[held].nunique())
            frame = frame[~held].reset_index(drop=True)
            if frame.empty:
                raise UserError(f"every workload of joint_dataset {folder} is one the {split} "
                                "split holds out; join another dataset or use another split")
        of = len(frame)  # what the share is drawn from
        if share < 1:
            frame = share_of_records(frame, share, seed)
        if frame.target.iloc[0] not in targets:
            targets.append(frame.target.iloc[0])
        head = 1 + targets.index(frame.target.iloc[0])
        prefix = JOINT_PREFIX + (f"{head}:" if head > 1 else "")
        frames.append(frame.assign(workload_key=prefix + frame.workload_key, head=head,
                                   dataset=folder))
        described.append({"dataset": folder, "share": share, "seed": seed, "of": of,
                          "target": frame.target.iloc[0], "records": len(frame),
                          "workloads": int(frame.workload_key.nunique()),
                          "left_out": left_out})
    return pd.concat(frames, ignore_index=True), targets, described, dropped


def trained_records(checkpoint_path: str, meta: dict, dataset: str | None,
                    purpose: str) -> pd.DataFrame:
    """Every usable record a checkpoint trained on, unfeaturised: its training side's
    (`training_records`) and those of its joint datasets (`joint_records_of`). A model fitted
    beside a checkpoint (its pretrained XGBModel, its LightGBM companion) thus sees what the
    network saw; `purpose` says who needs them.

    Raises:
        UserError: as `training_records` and `joint_records_of`.
    """
    frame = training_records(checkpoint_path, meta, dataset, purpose)
    joint = joint_records_of(checkpoint_path, meta, dataset, purpose)
    return frame if joint is None else pd.concat([frame, joint], ignore_index=True)


def joint_records_of(checkpoint_path: str, meta: dict, dataset: str | None,
                     purpose: str) -> pd.DataFrame | None:
    """The records of the `joint_dataset` folders that trained beside a checkpoint (`meta`:
    its description; `dataset`: its own records, default the folder it names), drawn again
    as training drew them (`joint_records`: the same share, seed and left-out workloads),
    under their joint keys, unfeaturised; None for a checkpoint trained without any.

    Raises:
        UserError: a joint folder's records changed since (records added), so the share it
            trained on cannot be drawn again; or as `joint_records`.
    """
    from datagen.records import read_records

    entries = joint_entries(meta)
    if not entries:
        return None
    own, _ = usable(read_records(dataset or meta["dataset"], RECORD_COLUMNS))
    if meta.get("test_dataset"):
        other, _ = usable(read_records(meta["test_dataset"], RECORD_COLUMNS))
        own = pd.concat([own, other], ignore_index=True)
    held = set(meta["sides"]["val"]) | set(meta["sides"]["test"])
    unseen = own[own.workload_key.isin(held)].reset_index(drop=True)
    seed = entries[0].get("seed", (meta.get("train_share") or {}).get("seed", 0))
    joint, _, again, _ = joint_records([e["dataset"] for e in entries], entries[0]["share"],
                                       seed, meta["target"], unseen, meta["dataset"],
                                       meta["split"])
    for entry, now in zip(entries, again):
        if entry.get("of", now["of"]) != now["of"]:
            raise UserError(f"{purpose} trains on the records {checkpoint_path} was trained "
                            f"on, a {entry['share']:g} share of the {entry['of']} records of "
                            f"joint dataset {entry['dataset']}, which now has {now['of']}: "
                            "that share cannot be drawn again; use the folder as it was then")
    return joint.drop(columns=["head", "dataset"])


class WorkloadBatchSampler(torch.utils.data.Sampler):
    """Batches of `per_workload` records from each of `workloads_per_batch` workloads.

    Shuffled per epoch (seeded); under DDP each process takes every world_size-th batch.
    Without shuffling (validation, test), batches are consecutive records of one workload and
    every process evaluates all of them, so ranking metrics see whole workloads.
    """

    def __init__(self, groups: list[np.ndarray], workloads_per_batch: int, per_workload: int,
                 shuffle: bool, seed: int = 0):
        self.groups, self.shuffle, self.seed = groups, shuffle, seed
        self.workloads_per_batch, self.per_workload = workloads_per_batch, per_workload
        self.epoch = 0

    def _batches(self) -> list[list[int]]:
        if not self.shuffle:
            size = self.workloads_per_batch * self.per_workload
            return [list(g[i:i + size]) for g in self.groups for i in range(0, len(g), size)]
        rng = np.random.default_rng((self.seed, self.epoch))
        chunks = []
        for g in self.groups:
            g = rng.permutation(g)
            chunks += [g[i:i + self.per_workload] for i in range(0, len(g), self.per_workload)]
        order = rng.permutation(len(chunks))
        k = self.workloads_per_batch
        return [list(np.concatenate([chunks[j] for j in order[i:i + k]]))
                for i in range(0, len(order), k)]

    def _world(self) -> tuple[int, int]:
        """(rank, world size) when training is sharded across processes, else (0, 1)."""
        if self.shuffle and torch.distributed.is_available() and \
                torch.distributed.is_initialized():
            return torch.distributed.get_rank(), torch.distributed.get_world_size()
        return 0, 1

    def __iter__(self):
        batches = self._batches()
        self.epoch += 1
        rank, world = self._world()
        return iter(batches[rank::world][:len(batches) // world])  # equal count per process

    def __len__(self) -> int:
        return len(self._batches()) // self._world()[1]


class ScheduleDataModule(L.LightningDataModule):
    """Measured schedules of a `datagen` dataset, featurised into typed program graphs.

    Args:
        dataset: dataset folder written by `datagen collect`.
        split: "shapes" (held-out workloads of every family), "family" (held-out families),
            "network" (held-out networks), out of distribution "novel-shapes",
            "unseen-family" or "cross-suite" (see the module docstring), or "all" (nothing
            held out for testing: the model that ships, evaluated through checkpoints of the
            other splits).
        test_fraction: share of each family's workloads held out ("shapes").
        test_families: families held out ("family").
        test_networks: networks held out ("network").
        test_dataset: the dataset whose workloads are the test side ("cross-suite"): another
            folder measured on the same target.
        val_fraction: share of the remaining workloads used for validation.
        workloads_per_batch: workloads in one training batch.
        per_workload: records of each workload in one training batch.
        cache_dir: featurised graphs are cached here, keyed by featuriser version.
        views: the optional views (`costmodel.views`, by name) to featurise beside every
            record's graph, e.g. "store" (MetaSchedule's per-store features), "trace" (its
            trace as tokens), "warp" (its nodes' warp access features): those the model reads
            (`train` sets this from `model.views`).
        seed: seeds the split and the batch order.
        per_flop: learn log-latency per FLOP of the lowered program (the model's output plus
            the program's log FLOPs is its log-latency); off by default, as it ranked worse
            on the committed dataset.
        normalize_per_workload: standardise each record's log-latency within its workload
            (minus the mean, over the standard deviation of its workload's records; training
            workloads are only on the training side). The model then learns to rank within
            a workload and predicts a relative score, not a latency; the checkpoint records
            it, and `costmodel evaluate` reports no MAPE for it. Excludes `per_flop`.
        train_share: train on this share (0 < share <= 1) of the training side's records, a
            seeded random draw within each workload that keeps at least 2 of each
            (`share_of_records`); validation and test keep all their records, and the
            normalisation is fitted on the share. For learning curves and few-shot transfer.
        share_seed: seeds the draw of `train_share` (default: `seed`), so the share can vary
            while the split stays.
        max_cv: train only on records whose label spread at most this (`latency_cv`: std /
            mean of the repeats of the steadier measurement); validation and test keep every
            record. None: keep all (the default).
        joint_dataset: another dataset folder, or a list of them, whose records train
            beside the training side (never validate or test), e.g. CPU measurements beside a
            share of GPU ones, or other CPUs' datasets beside this CPU's; their workloads stay
            apart from the dataset's own (keys prefixed `JOINT_PREFIX`) even where they are
            the same programs, and each is featurised for its own target; in the splits out
            of distribution a joint workload the split would hold out (the same program as a
            validation or held-out one, their family, a buffer shape of theirs) is left out
            (`joint_records`). They are grouped by
            target (`joint_targets`, in the order given; folders of one target are one
            group): each target's latencies are standardised with statistics of its own
            (`joint_normalizations`; two targets' latencies share no scale; per workload if
            `normalize_per_workload`). Every record then names the head it trains (`head`:
            0 for the dataset's own, 1 + its target's place in `joint_targets` for the
            others), which a model with `joint_head` reads. The checkpoint is for the
            dataset's target, with its target statistics, and records what trained beside it
            (`joint`: one folder's dict, or a list of them for several).
        joint_share: train on this share of each `joint_dataset`'s records
            (`share_of_records`, seeded by `seed`), to bound training time.
        pseudo_labels: with `train_share` below 1, a Parquet table of a teacher's predicted
            latencies (columns `workload_key`, `trace_hash`, `latency` in seconds; say models
            trained on the same share): the training side's records outside the share train
            with these in place of their measurements (`read_pseudo_labels`; records it has
            no row for are left out). Validation, test and the share keep their
            measurements, and the checkpoint records how many trained so (`train_share`'s
            `pseudo`). For few-shot transfer: unmeasured programs of the target are cheap.
    """

    def __init__(self, dataset: str = "data/llvm-full", split: str = "shapes",
                 test_fraction: float = 0.2, test_families: list[str] | None = None,
                 val_fraction: float = 0.1, workloads_per_batch: int = 8,
                 per_workload: int = 16, cache_dir: str = ".cache/features", seed: int = 0,
                 per_flop: bool = False, test_networks: list[str] | None = None,
                 normalize_per_workload: bool = False, train_share: float = 1.0,
                 share_seed: int | None = None, max_cv: float | None = None,
                 views: list[str] | None = None,
                 joint_dataset: str | list[str] | None = None, joint_share: float = 1.0,
                 pseudo_labels: str | None = None, test_dataset: str | None = None):
        super().__init__()
        if (split == "cross-suite") != bool(test_dataset):
            raise UserError("the cross-suite split tests on test_dataset, and only it does: "
                            "give both or neither")
        if per_flop and normalize_per_workload:
            raise UserError("per_flop and normalize_per_workload exclude each other: "
                            "standardising within a workload already removes its scale")
        check_share(train_share)
        check_share(joint_share, "joint_share")
        if pseudo_labels and train_share >= 1:
            raise UserError("pseudo_labels label the training records outside train_share: "
                            "set train_share below 1, or leave pseudo_labels out")
        if max_cv is not None and not max_cv > 0:
            raise UserError(f"max_cv must be above 0 (a coefficient of variation), not {max_cv}")
        feature_views.named(views)  # an unknown name fails here, before any data is read
        self.save_hyperparameters()
        self.normalization: Normalization | None = None
        self.frames: dict[str, pd.DataFrame] = {}
        self.sides: dict[str, list[str]] = {}
        self.train_share: dict = {}  # what the checkpoint records of the share trained on
        self.target: str | None = None  # the dataset's target (JSON): what models predict for
        self.joint: dict | list[dict] | None = None  # what the checkpoint records of them
        self.joint_targets: list[str] = []  # the joint datasets' targets: heads 1, 2, ...
        self.joint_normalizations: list[Normalization] = []  # their target statistics
        self.dropped = 0
        self.noisy_dropped = 0  # training records over max_cv
        self.records: pd.DataFrame | None = None  # given records in place of `dataset`'s

    @classmethod
    def of_records(cls, frame: pd.DataFrame, name: str = "the given records",
                   **options) -> "ScheduleDataModule":
        """The module over records already in memory (a frame of `datagen.records`' columns,
        of one target), in place of a dataset folder's; `name` is what checkpoints and
        messages call them. The other `options` are the constructor's."""
        data = cls(dataset=name, **options)
        data.records = frame
        return data

    def setup(self, stage: str | None = None) -> None:
        from datagen.records import read_records

        if self.frames:
            return
        hp = self.hparams
        given = self.records
        if given is not None and (missing := [c for c in RECORD_COLUMNS if c not in given]):
            raise UserError(f"{hp.dataset} lack the columns {', '.join(missing)}; give records "
                            "as `datagen.records.read_records` reads them")
        frame, self.dropped = usable(read_records(hp.dataset, RECORD_COLUMNS) if given is None
                                     else given[RECORD_COLUMNS].reset_index(drop=True))
        if frame.empty:
            raise UserError(f"{hp.dataset} has no successfully measured records to train on")
        check_one_target(frame, hp.dataset)
        self.target = frame.target.iloc[0]
        if hp.test_dataset:
            frame = with_test_dataset(frame, hp.test_dataset, hp.dataset)
        frame = self._featurise(frame)
        self.sides = split_workloads(frame, hp.split, hp.test_fraction, hp.test_families or [],
                                     hp.val_fraction, hp.seed, hp.test_networks)
        self.frames = {name: frame[frame.workload_key.isin(keys)].reset_index(drop=True)
                       for name, keys in self.sides.items()}
        if hp.max_cv is not None:
            train = self.frames["train"]
            steady = train.latency_cv.astype(float) <= hp.max_cv
            self.noisy_dropped = int((~steady).sum())
            self.frames["train"] = train[steady].reset_index(drop=True)
            if self.frames["train"].empty:
                raise UserError(f"no training record of {hp.dataset} spreads at most max_cv "
                                f"{hp.max_cv}; raise it")
        self.train_share = {"share": hp.train_share, "seed": self.share_seed,
                            "records": len(self.frames["train"]),
                            "of": len(self.frames["train"])}
        if hp.train_share < 1:
            train = self.frames["train"]
            rows = share_rows(train, hp.train_share, self.share_seed)
            self.frames["train"] = train.iloc[rows].reset_index(drop=True)
            self.train_share["records"] = len(rows)
            if hp.pseudo_labels:
                rest = train.drop(index=train.index[rows]).reset_index(drop=True)
                rest = self._pseudo_labelled(rest)
                self.frames["train"] = pd.concat([self.frames["train"], rest],
                                                 ignore_index=True)
        self.frames["train"] = self.frames["train"].assign(head=0)
        if hp.joint_dataset:
            joint = self._joint_records()
            self.frames["train"] = pd.concat([self.frames["train"], joint], ignore_index=True)
        train = self.frames["train"]
        self.normalization = Normalization.fit(  # inputs over every dataset, if joint
            train.graph, train.latency_median, per_flop=hp.per_flop,
            workloads=train.workload_key if hp.normalize_per_workload else None)
        if hp.joint_dataset:  # each target's latencies standardised with its own statistics
            every = self.normalization
            heads = train["head"].to_numpy()
            own, *others = [every.refit_targets(train.graph[heads == h],
                                                train.latency_median[heads == h],
                                                train.workload_key[heads == h])
                            for h in range(1 + len(self.joint_targets))]
            self.normalization, self.joint_normalizations = own, others

    def _featurise(self, frame: pd.DataFrame) -> pd.DataFrame:
        """`frame` with each record's graph (`graph`), for the target of its records; records
        that fail to featurise are dropped and counted in `dropped`."""
        from tqdm import tqdm

        from costmodel.featurize import FeaturizeError, Featurizer

        hp = self.hparams
        read = feature_views.named(hp.views)
        featurizer = Featurizer(json.loads(frame.target.iloc[0]), cache_dir=hp.cache_dir,
                                **{view.flag: view in read
                                   for view in feature_views.optional()})
        graphs = []
        rows = zip(frame.workload_ir, frame.trace, frame.trace_hash)
        for graph in tqdm(featurizer.iter_records(rows), total=len(frame), desc="featurise",
                          unit="rec", disable=len(frame) < 256):
            graphs.append(None if isinstance(graph, FeaturizeError) else graph)
        frame = frame.assign(graph=graphs)
        self.dropped += int(frame.graph.isna().sum())
        return frame[frame.graph.notna()].reset_index(drop=True)

    def _pseudo_labelled(self, rest: pd.DataFrame) -> pd.DataFrame:
        """The training records outside the share (`rest`) that `pseudo_labels` has a latency
        for, each with that latency as its label."""
        hp = self.hparams
        labels = read_pseudo_labels(hp.pseudo_labels)
        rest = rest.drop(columns=["latency_median", "latency_cv", "latencies"]).merge(
            labels.rename(columns={"latency": "latency_median"}), how="inner",
            on=["workload_key", "trace_hash"])
        if rest.empty:
            raise UserError(f"pseudo_labels {hp.pseudo_labels} labels none of the training "
                            f"records outside the share of {hp.dataset}; give the teacher's "
                            "predictions for this split's training side")
        self.train_share["pseudo"] = {"labels": hp.pseudo_labels, "records": len(rest)}
        return rest.assign(latency_cv=np.nan, latencies=None)

    @property
    def joint_normalization(self) -> Normalization | None:
        """The target statistics of the first joint target (head 1); None without one."""
        return self.joint_normalizations[0] if self.joint_normalizations else None

    def _joint_records(self) -> pd.DataFrame:
        """The featurised shares of the `joint_dataset` folders' records that train beside
        the training side (`joint_records`), each featurised for its own target; sets `joint`
        and `joint_targets`."""
        hp = self.hparams
        frame, self.joint_targets, described, dropped = joint_records(
            hp.joint_dataset, hp.joint_share, hp.seed, self.target,
            pd.concat([self.frames["val"], self.frames["test"]], ignore_index=True),
            hp.dataset, hp.split)
        self.dropped += dropped
        parts = []
        for folder, part in frame.groupby("dataset", sort=False):  # in the order given
            parts.append(self._featurise(part))
            if parts[-1].empty:
                raise UserError(f"no record of joint_dataset {folder} could be featurised")
        frame = pd.concat(parts, ignore_index=True)
        for entry in described:  # what trained, after featurising
            keys = frame.workload_key[frame["dataset"] == entry["dataset"]]
            entry.update(records=len(keys), workloads=int(keys.nunique()))
        frame = frame.drop(columns="dataset")
        self.joint = described[0] if isinstance(hp.joint_dataset, str) else described
        return frame

    @property
    def share_seed(self) -> int:
        """The seed of the `train_share` draw."""
        return self.hparams.seed if self.hparams.share_seed is None else self.hparams.share_seed

    def _dataset(self, side: str):
        frame = self.frames[side]
        ids = {k: i for i, k in enumerate(sorted(frame.workload_key.unique()))}
        ys = self.normalization.targets(frame.graph, frame.latency_median, frame.workload_key)
        heads = frame["head"].to_numpy() if "head" in frame else np.zeros(len(frame), int)
        for head, norm in enumerate(self.joint_normalizations, start=1):
            rows = heads == head
            ys[rows] = norm.targets(frame.graph[rows], frame.latency_median[rows],
                                    frame.workload_key[rows])
        data = [self.normalization.data(g, y=y, group=ids[k])
                for g, y, k in zip(frame.graph, ys, frame.workload_key)]
        if self.joint is not None:  # which head each record trains (a model's `joint_head`)
            for d, head in zip(data, heads):
                d.head = torch.tensor([int(head)])
        groups = [np.flatnonzero(frame.workload_key.to_numpy() == k) for k in ids]
        return data, groups

    def _loader(self, side: str, shuffle: bool):
        from torch_geometric.loader import DataLoader

        data, groups = self._dataset(side)
        sampler = WorkloadBatchSampler(groups, self.hparams.workloads_per_batch,
                                       self.hparams.per_workload, shuffle, self.hparams.seed)
        return DataLoader(data, batch_sampler=sampler)

    def train_dataloader(self):
        return self._loader("train", shuffle=True)

    def val_dataloader(self):
        return self._loader("val", shuffle=False)

    def test_dataloader(self):
        return self._loader("test", shuffle=False)
