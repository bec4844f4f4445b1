"""The tables of bench/README.md and of the main README.md, generated from the committed result
files, so that no figure drifts from the run that measured it.

A generated table sits between two marker lines of the README:

    <!-- table: KIND PATH [PATH ...] head="..." cols=... row="SELECTOR LABEL" ... -->
    | the table, as this script writes it |
    <!-- end table -->

The opening marker may wrap over several lines (it ends at `-->`); its words split as a shell
splits them, so a value with spaces is quoted. KIND names the kind of result file, and with it
the renderer that reads it (`KINDS`; `--help` lists each kind's SELECTORs and FIELDs); each
PATH is a result file relative to the README's own folder (for bench/README.md
results/ood/ablations-novel-shapes/summary.json.xz, for README.md
bench/results/ood/ablations-novel-shapes/summary.json.xz), and a PATH written KIND2:PATH is read
by another kind's renderer. The options:

- head="label | first | second ...": the header row, the label column's cell and then one per
  figure column;
- cols=FIELD,FIELD+FIELD,...: the figure columns, in order; a column of several FIELDs joined
  by + shows them as "a / b". A FIELD is a figure the kind knows (tau, top1, mape, ...), with
  an optional :N (N decimals) and % (a percent sign) after it, as in mape:0%;
- row="SELECTOR LABEL", once per row, in order: SELECTOR picks what the row's figures are of
  (a model of a report, a variant of an ablation, ...) in the first PATH, or, written
  N:SELECTOR, in the Nth; LABEL, the rest, is the row's first cell, or its first cells
  separated by | (prose: the same number of them in every row). SELECTOR,SELECTOR,... (no
  spaces) gives one SELECTOR per figure column, so that a row may gather figures of several
  files; a SELECTOR written - is a cell with no figure (it shows none=, once), and a row of
  - alone is a row of such cells; a SELECTOR written SELECTOR=FIELD+FIELD... gives its cell
  those FIELDs in place of its column's (a tuning row's ratio in a table of taus, say);
- bold=C,R.C,R.C.P,...: cells set in bold: the highest figure of figure column C (1 is the
  first), the cell of row R (1 is the first) and column C, or its Pth FIELD alone;
- none=TEXT: what an undefined figure shows (default n/a);
- nospread=C,...: figure columns that show the mean alone, without its spread.

A figure with a spread (over seeds or runs) shows as "mean ± standard deviation".

    python bench/tables.py            # rewrite every marked table of both READMEs in place
    python bench/tables.py --check    # write nothing; exit 1 if a table differs from its files

`--readme FILE` (once or more) works on those files instead of the two READMEs. `--check`
prints one line per table that differs (its README, its marker's line, kind and files). A
missing or unreadable file, an unknown kind, or a marker that asks for what its file does
not hold is one line on stderr and exit status 2. Only the standard library: this runs
before any install.
"""

from __future__ import annotations

import argparse
import inspect
import json
import lzma
import math
import os
import re
import shlex
import statistics
import sys
import tempfile
from dataclasses import dataclass, field

OPEN = "<!-- table:"
CLOSE = "-->"
END = "<!-- end table -->"
HERE = os.path.dirname(os.path.abspath(__file__))
# the READMEs whose marked tables a run without --readme writes or checks: bench's, the main one
READMES = (os.path.join(HERE, "README.md"), os.path.join(os.path.dirname(HERE), "README.md"))

# a metric's FIELD name -> its key in the result files (costmodel/metrics.py)
METRICS = {"tau": "kendall_tau", "top1": "top1_score", "top5": "top5_score",
           "apeak32": "apeak32", "opa": "opa", "ape": "ape", "mape": "mape"}
ERRORS = ("ape", "mape")  # percentages: one decimal unless the field says otherwise


class TableError(Exception):
    """A marker that cannot be rendered: one line for stderr."""


@dataclass(frozen=True)
class Figure:
    """One figure of a file: its value (None: undefined), its spread (None: a single value)
    and how many decimals it shows unless its FIELD says otherwise."""
    value: float | None
    spread: float | None = None
    decimals: int = 3


@dataclass(frozen=True)
class Series:
    """Several figures in one cell (each seed's, say), joined by `sep`."""
    figures: list
    sep: str


def metric_figure(value, name: str, spread=None) -> Figure:
    """A metric's figure, with the decimals of its kind (three; one for APE and MAPE)."""
    return Figure(value, spread, 1 if name in ERRORS else 3)


def metric_key(name: str) -> str:
    """The result files' key of metric FIELD `name`."""
    if name not in METRICS:
        raise TableError(f"unknown metric {name!r}; the metrics: {', '.join(METRICS)}")
    return METRICS[name]


def spread_figure(entry: dict | None, name: str) -> Figure:
    """A {"mean", "std", "n"} entry (bench/ablations.py and bench/transfer.py write them) as a
    figure: its spread shown only where several runs made it."""
    if entry is None:
        return metric_figure(None, name)
    return metric_figure(entry["mean"], name, entry["std"] if entry["n"] > 1 else None)


class Renderer:
    """The figures of one result file: `figure(SELECTOR, FIELD)` gives a Figure, a Series or a
    text (a KeyError or the like where the file has no such figure)."""

    def __init__(self, data: dict):
        self.data = data


class Report(Renderer):
    """`costmodel evaluate`'s report.json (costmodel/evaluate.py).

    SELECTOR: a model of its "models" (graphsage, xgb, lightgbm, mlp): the mean over its runs,
    ± their standard deviation when it has several; MODEL.N: its run N alone (0 the first);
    MODEL[.N]@KEY: that run's figures of one workload, family or network KEY (its
    per_workload, per_family, per_network), of a model's only run where no N is given.
    FIELDs: the metrics tau, top1, top5, apeak32, opa, ape, mape; runs (how many).
    """

    def figure(self, selector: str, name: str):
        selector, at, key_of = selector.partition("@")
        model_name, _, run = selector.partition(".")
        model = self.data["models"][model_name]
        if name == "runs":
            return str(model["runs"])
        key = metric_key(name)
        if at:
            if not run and model["runs"] != 1:
                raise TableError(f"{model_name!r} has {model['runs']} runs: name one, as in "
                                 f"{model_name}.0@{key_of}")
            scores = model["per_run"][int(run or 0)]
            found = next((scores[group][key_of] for group in
                          ("per_workload", "per_family", "per_network")
                          if key_of in scores.get(group, {})), None)
            if found is None:
                raise KeyError(key_of)
            return metric_figure(found[key], name)
        if run:
            return metric_figure(model["per_run"][int(run)]["overall"][key], name)
        return metric_figure(model["mean"][key], name,
                             model["std"][key] if model["runs"] > 1 else None)


class Ablation(Renderer):
    """bench/ablations.py's summary.json.

    SELECTOR: a variant (the mean over its seeds, ± their standard deviation when it ran
    several), VARIANT.ensemble (its seeds as one ensemble), VARIANT.hybrid (that blended with
    --hybrid's baseline), VARIANT.S (its seed S alone), or a baseline (xgb, lightgbm, mlp).
    FIELDs: the held-out metrics tau, top1, top5, apeak32, opa, ape, mape; val (the best
    validation tau), seeds (how many), what (the variant's description), weight (the hybrid's
    share of ours); fit.METRIC and fitval.METRIC: --diagnose's fit of the variant's first seed
    (or of the baseline) on a sample of its training workloads, and on the validation ones.
    SELECTOR@KEY: its held-out figures of one family, network or workload KEY (a variant of
    one seed, or VARIANT.S, VARIANT.hybrid, VARIANT.ensemble, a baseline). What a row does not
    have (a baseline's validation tau, an ensemble's description) is an empty cell.
    """

    def grouped(self, base: str, part: str, key_of: str, name: str) -> Figure:
        """SELECTOR@KEY's metric `name`: the scores of one held-out family, network or
        workload."""
        if base not in self.data["variants"]:
            scores = self.data["baselines"][base]
        elif part in ("ensemble", "hybrid"):
            scores = self.data["variants"][base][part]
        else:
            runs = [r for r in self.data["runs"] if r["variant"] == base
                    and (not part or r["seed"] == int(part))]
            if len(runs) != 1:
                raise TableError(f"{base!r} ran {len(runs)} seeds: name one, as in "
                                 f"{base}.{runs[0]['seed'] if runs else 0}@{key_of}")
            scores = runs[0]
        found = next((scores[group][key_of] for group in ("per_family", "per_network",
                                                          "per_workload")
                      if key_of in scores.get(group, {})), None)
        if found is None:
            raise KeyError(key_of)
        return metric_figure(found[metric_key(name)], name)

    def figure(self, selector: str, name: str):
        selector, at, key_of = selector.partition("@")
        base, _, part = selector.partition(".")
        if at:
            return self.grouped(base, part, key_of, name)
        side, dot, fitted = name.partition(".")
        if dot and side in ("fit", "fitval"):
            found = self.data["diagnosis"]["fit"][base]["train" if side == "fit" else "val"]
            return metric_figure(found[metric_key(fitted)], fitted)
        if base not in self.data["variants"]:
            if name in ("what", "seeds", "val", "weight"):
                return ""  # a baseline has none of these
            return metric_figure(self.data["baselines"][base]["overall"][metric_key(name)],
                                 name)
        row = self.data["variants"][base]
        if name == "seeds":  # a seed's row: one
            return "1" if part.isdigit() else str(row["val_kendall_tau"]["n"])
        if not part:
            if name == "what":
                return row["what"]
            if name == "val":
                return spread_figure(row["val_kendall_tau"], "tau")
            return spread_figure(row["test"][metric_key(name)], name)
        if part == "hybrid" and name == "weight":
            return Figure(row["hybrid"]["weight"], decimals=1)
        if part in ("ensemble", "hybrid"):
            if name in ("what", "val", "weight"):
                return ""  # no description, no validation tau of its own
            return metric_figure(row[part]["overall"][metric_key(name)], name)
        run = next(r for r in self.data["runs"] if r["variant"] == base and r["seed"] == int(part))
        if name == "val":
            return metric_figure(run["val_kendall_tau"], "tau")
        return metric_figure(run["overall"][metric_key(name)], name)


def budget(text: str) -> tuple[str, int]:
    """TUNER@B as (tuner, budget)."""
    tuner, at, trials = text.rpartition("@")
    if not at or not trials.isdigit():
        raise TableError(f"{text!r} is not TUNER@TRIALS")
    return tuner, int(trials)


class Tuning(Renderer):
    """`tune compare`'s summary.json (tuning/report.py; `bench/tuning_vs_metaschedule.py
    --report` writes the same).

    SELECTOR: a workload key, or geomean (the geometric mean over the workloads), with FIELDs
    TUNER@B (the re-measured finalist of TUNER at B trials, us, the median over seeds),
    inrun.TUNER@B (its in-run best), ratio.A@B/C@D (the row's re-measured A@B over C@D),
    seeds.A@B/C@D (a workload's paired ratio of each seed: the median of its re-measurement
    rounds' ratios; A is one of ours, bo or ms-ours). Written WHERE#TUNER (geomean#bo), the
    row is one tuner's: its FIELDs @B and inrun@B need no tuner, reach is the trials the
    tuner took to reach the reference's (ms-default's) latency at the largest budget (the
    median over seeds, and for geomean over workloads, with how many it reached), and wall
    its wall time per trial in seconds (the median over seeds, and for geomean over
    workloads). Or
    SELECTOR A@B/C@D, the pairs of that comparison, with FIELDs ratio (their geometric mean),
    ci95 (its 95% paired-bootstrap interval), wtl (wins / ties / losses), reach (the median of
    the trials A took to reach C's in-run best at D, and in how many pairs it did), workloads
    (each workload's median paired ratio over seeds, in the summary's order).
    """

    def paired(self, text: str) -> dict:
        """The paired statistics of A@B/C@D."""
        ours, _, theirs = text.partition("/")
        (a, b), (c, d) = budget(ours), budget(theirs)
        return next(p for p in self.data["paired"] if (p["ours"], p["ours_budget"],
                                                       p["baseline"], p["baseline_budget"])
                    == (a, b, c, d))

    def tuners(self, where: str) -> dict:
        """Per tuner, the figures of a workload, or of the geometric mean ("geomean")."""
        return self.data["geomean"] if where == "geomean" else self.data["workloads"][where]

    def latency(self, where: str, text: str, measure: str = "remeasured") -> Figure:
        """TUNER@B's re-measured finalist (or in-run best, `measure` "best") in us."""
        tuner, trials = budget(text)
        return Figure(self.tuners(where)[tuner][f"{measure}@{trials}"] * 1e6, decimals=1)

    def figure(self, selector: str, name: str):
        if "/" in selector and selector.partition("#")[0] not in self.data["workloads"]:
            return self.comparison(self.paired(selector), name)  # A@B/C@D
        where, _, tuner = selector.partition("#")
        if tuner and name == "reach":
            row = self.tuners(where)[tuner]
            trials = row["to_reach"]
            text = f"{trials:.0f}" if math.isfinite(trials) else "never"
            return text + (f" ({row['reached']})" if "reached" in row else "")
        if tuner and name == "wall":
            row = self.tuners(where)[tuner]
            if "s_per_trial" not in row:
                raise TableError(f"{where}#{tuner} recorded no wall time (a comparison made "
                                 "before runs kept theirs)")
            return Figure(row["s_per_trial"], decimals=2)
        if tuner and name.startswith("@"):  # a tuner's row: its FIELDs name no tuner
            name = tuner + name
        elif tuner and name.startswith("inrun@"):
            name = f"inrun.{tuner}{name[len('inrun'):]}"
        kind, dot, rest = name.partition(".")
        if not dot:
            return self.latency(where, name)
        if kind == "inrun":
            return self.latency(where, rest, "best")
        ours, _, theirs = rest.partition("/")
        if kind == "ratio":
            return Figure(self.latency(where, ours).value / self.latency(where, theirs).value)
        if kind == "seeds":
            pairs = sorted((p for p in self.paired(rest)["pairs"] if p["workload"] == where),
                           key=lambda p: p["seed_index"])
            return Series([Figure(p["ratio"], decimals=2) for p in pairs], ", ")
        raise TableError(f"unknown tuning field {name!r}")

    def comparison(self, pair: dict, name: str):
        """A FIELD of one comparison's paired statistics."""
        if name == "ratio":
            return Figure(pair["geomean_ratio"])
        if name == "ci95":
            return Series([Figure(v) for v in pair["ci95"]], "-")
        if name == "wtl":
            return f"{pair['wins']} / {pair['ties']} / {pair['losses']}"
        if name == "reach":
            trials = pair["to_reach_median"]
            done, _, of = pair["reached"].partition("/")
            return (f"{trials:.0f}" if math.isfinite(trials) else "never") + f" ({done} of {of})"
        if name == "workloads":
            per = {}
            for p in pair["pairs"]:
                per.setdefault(p["workload"], []).append(p["ratio"])
            return Series([Figure(statistics.median(per[key]))
                           for key in self.data["workloads"] if key in per], ", ")
        raise TableError(f"unknown field {name!r} of a paired comparison")


class Transfer(Renderer):
    """bench/transfer.py's summary.json.

    SELECTOR: MODE@SHARE (scratch@0.05; together@SHARE: --together's ensembles of every mode),
    or SHARE alone where the FIELDs name their mode; source, source.start (the source
    checkpoint untrained: as it loads, as fine-tuning starts from it). FIELDs: [MODE.]METRIC
    (the mean over seeds ± their standard deviation), [MODE.]seeds.METRIC (each seed's,
    "a / b / c"), [MODE.]members.METRIC (--ensemble's members alone, mean ± standard
    deviation), [MODE.]records (the share's training records, mean over seeds).
    """

    def figure(self, selector: str, name: str):
        if selector in ("source", "source.start"):
            scores = self.data["source"]["metrics" if selector == "source" else
                                         "fine_tuning_start"]
            return metric_figure(scores[metric_key(name)], name)
        row_mode, _, share = selector.rpartition("@")
        share = f"{float(share):g}"
        parts = name.split(".")
        mode = parts.pop(0) if len(parts) > 1 and parts[0] not in ("seeds", "members") \
            else row_mode
        if not mode:
            raise TableError(f"{selector!r} names no mode, nor does field {name!r}")
        which = parts.pop(0) if len(parts) > 1 else None
        (measure,) = parts
        together = self.data["together"] if mode == "together" else None
        curve = together["curves"][share] if together else self.data["curves"][mode][share]
        if measure == "records":
            return Figure(curve["train_records"], decimals=0)
        key = metric_key(measure)
        if which == "members":  # none where the run was no ensemble
            return spread_figure((curve.get("members") or {}).get(key), measure)
        if which == "seeds":
            runs = together["runs"] if together else \
                [r for r in self.data["runs"] if r["mode"] == mode]
            mine = sorted((r for r in runs if f"{r['share']:g}" == share),
                          key=lambda r: r["seed"])
            return Series([metric_figure(r["metrics"][key], measure) for r in mine], " / ")
        if which is not None:
            raise TableError(f"unknown transfer field {name!r}")
        return spread_figure(curve[key], measure)


class Remeasure(Renderer):
    """bench/remeasure_heldout.py's summary.json.

    SELECTOR: a ranking of its "overall" (here_vs_here, dataset_vs_here, model_vs_dataset,
    model_vs_here, xgb_vs_dataset, xgb_vs_here) with FIELDs tau and top1; or K, the rankings
    with K schedules of each task measured here ("adapted_here"), with FIELDs MODEL.tau and
    MODEL.top1 (MODEL: model, gp, finetuned, finetuned_gp, dataset).
    """

    def figure(self, selector: str, name: str):
        if selector in self.data["overall"]:
            return metric_figure(self.data["overall"][selector][metric_key(name)], name)
        model, _, measure = name.partition(".")
        return metric_figure(self.data["adapted_here"][selector][model][metric_key(measure)],
                             measure)


class Latency(Renderer):
    """An end-to-end summary of built networks' latencies: {"latency_us": {BUILD: [one per
    seed, us]}} (bench/results/tuning-network/summary.json).

    SELECTOR: a BUILD (untuned, ms-default, bo, ...). FIELDs: median (over its seeds, us),
    seeds (each seed's, "a, b, c"; none where the build ran once).
    """

    def figure(self, selector: str, name: str):
        runs = self.data["latency_us"][selector]
        if name == "median":
            return Figure(statistics.median(runs), decimals=1)
        if name == "seeds":
            if len(runs) == 1:
                return Figure(None)
            return Series([Figure(us, decimals=1) for us in runs], ", ")
        raise TableError(f"unknown latency field {name!r} (median, seeds)")


def lookup(node, path: str):
    """The item at a dotted path of a JSON object (a key with dots in it, such as 0.3, is
    matched whole, the longest key first; a list takes an index, or K:V&K:V..., its one object
    whose keys K hold the values V); "." is the object itself."""
    parts = [] if path in ("", ".") else path.split(".")
    while parts:
        for j in range(len(parts), 0, -1):
            key = ".".join(parts[:j])
            if isinstance(node, dict) and key in node:
                node = node[key]
                break
            if isinstance(node, list) and j == 1 and key.isdigit():
                node = node[int(key)]
                break
            if isinstance(node, list) and j == 1 and ":" in key:
                node = matching(node, key)
                break
        else:
            raise KeyError(path)
        parts = parts[j:]
    return node


def matching(items: list, where: str) -> dict:
    """The one object of `items` whose keys hold the values of `where` (K:V&K:V..., each value
    compared as text: per_task:64 matches 64)."""
    wanted = [pair.partition(":")[::2] for pair in where.split("&")]
    found = [item for item in items if isinstance(item, dict)
             and all(k in item and str(item[k]) == v for k, v in wanted)]
    if len(found) != 1:
        raise TableError(f"{len(found)} entries match {where!r}, not one")
    return found[0]


class Value(Renderer):
    """Any JSON result file whose figures sit at fixed keys (`bench/collect_vs_tune_tir.py`'s and
    `bench/matmul_vs_library.py`'s result.json, `bench/blend_weight.py`'s summary.json).

    SELECTOR: the dotted path of an object in it, . for the whole file (a key with dots in it
    is written as it is: cross_suite_test.0.3; an entry of a list by its index, or by the
    values of its keys: paired.baseline:ms-default&per_task:64). FIELDs: a metric (tau, top1,
    top5, apeak32, opa, ape, mape: its key in the result files under SELECTOR), or the dotted
    path of a number under SELECTOR (three decimals unless FIELD:N says), or of a text.
    """

    def figure(self, selector: str, name: str):
        node = lookup(self.data, selector)
        if name in METRICS:
            return metric_figure(lookup(node, METRICS[name]), name)
        found = lookup(node, name)
        return found if isinstance(found, str) else Figure(found)


KINDS = {"report": Report, "ablation": Ablation, "tuning": Tuning, "transfer": Transfer,
         "remeasure": Remeasure, "latency": Latency, "value": Value}


@dataclass
class Field:
    """One figure of a column: its name, and how it shows (decimals, a percent sign)."""
    name: str
    decimals: int | None = None
    percent: bool = False


@dataclass
class Marker:
    """What one marker asks for."""
    line: int  # the marker's line number in the README, from 1
    kind: str
    paths: list = field(default_factory=list)  # (kind, path) per PATH
    head: list = field(default_factory=list)
    cols: list = field(default_factory=list)  # per column, its Fields
    # per row, (its sources: one (path index, selector, its Fields or None: its column's), or
    # one per figure column; label cells)
    rows: list = field(default_factory=list)
    bold: list = field(default_factory=list)  # (row or None, column, part or None), from 1
    none: str = "n/a"
    nospread: set = field(default_factory=set)  # figure columns without spreads, from 1

    def where(self) -> str:
        """The marker and its files, for a message."""
        return f"line {self.line}: table {self.kind} {' '.join(p for _, p in self.paths)}"


FIELD = re.compile(r"^(?P<name>[^:%]+)(?::(?P<decimals>\d+))?(?P<percent>%)?$")


def parse_field(text: str, line: int) -> Field:
    """FIELD[:N][%] as a Field."""
    found = FIELD.match(text)
    if not found:
        raise TableError(f"line {line}: {text!r} is not FIELD[:DECIMALS][%]")
    decimals = found["decimals"]
    return Field(found["name"], None if decimals is None else int(decimals),
                 bool(found["percent"]))


NO_FIGURE = "-"  # a SELECTOR of a cell without a figure


def parse_source(selector: str, line: int) -> tuple[int, str, list | None]:
    """[N:]SELECTOR[=FIELD+FIELD...] as (path index from 0, selector, its cell's Fields or
    None: its column's)."""
    selector, eq, fields = selector.partition("=")
    own = [parse_field(f, line) for f in fields.split("+")] if eq else None
    index, colon, rest = selector.partition(":")
    if colon and index.isdigit():
        return int(index) - 1, rest, own
    return 0, selector, own


def parse_row(value: str, line: int) -> tuple[list[tuple], list[str]]:
    """row="[N:]SELECTOR[=FIELDS][,[N:]SELECTOR[=FIELDS] ...] LABEL[ | LABEL ...]" as (per
    SELECTOR, its path index from 0, itself and its own Fields or None; label cells)."""
    selectors, _, label = value.strip().partition(" ")
    cells = [cell.strip() for cell in label.split("|")]
    return [parse_source(s, line) for s in selectors.split(",")], cells


def parse_bold(value: str, line: int) -> list[tuple]:
    """bold=C,R.C,R.C.P,... as (row or None, column, part or None) per cell, all from 1."""
    found = []
    for cell in value.split(","):
        numbers = cell.split(".")
        if not all(n.isdigit() for n in numbers) or len(numbers) > 3:
            raise TableError(f"line {line}: bold={value}: {cell!r} is not C, R.C or R.C.P")
        numbers = [int(n) for n in numbers]
        if len(numbers) == 1:  # C: the column's highest
            found.append((None, numbers[0], None))
        else:  # R.C or R.C.P
            found.append(tuple(numbers + [None])[:3])
    return found


def parse_marker(text: str, line: int) -> Marker:
    """The marker's words (its text between "<!-- table:" and "-->") as a Marker."""
    try:
        words = shlex.split(text)
    except ValueError as err:
        raise TableError(f"line {line}: the marker does not split into words ({err})") from None
    if not words:
        raise TableError(f"line {line}: the marker names no kind")
    marker = Marker(line, words[0])
    if marker.kind not in KINDS:
        raise TableError(f"line {line}: unknown kind {marker.kind!r}; the kinds: "
                         f"{', '.join(KINDS)}")
    for word in words[1:]:
        key, eq, value = word.partition("=")
        if not eq:  # a PATH, or KIND:PATH
            kind, colon, path = word.partition(":")
            marker.paths.append((kind, path) if colon and kind in KINDS else (marker.kind, word))
        elif key == "head":
            marker.head = [cell.strip() for cell in value.split("|")]
        elif key == "cols":
            marker.cols = [[parse_field(f, line) for f in col.split("+")]
                           for col in value.split(",")]
        elif key == "row":
            marker.rows.append(parse_row(value, line))
        elif key == "bold":
            marker.bold += parse_bold(value, line)
        elif key == "none":
            marker.none = value
        elif key == "nospread":
            if not all(c.isdigit() for c in value.split(",")):
                raise TableError(f"line {line}: nospread={value} is not C,C,...")
            marker.nospread = {int(c) for c in value.split(",")}
        else:
            raise TableError(f"line {line}: unknown option {key!r} (head, cols, row, bold, "
                             "none, nospread)")
    check_marker(marker)
    return marker


def check_marker(marker: Marker) -> None:
    """Refuse a marker whose table cannot be made: no file, no rows or columns, a header of
    another width than the rows, a row of a file not named."""
    if not marker.paths:
        raise TableError(f"{marker.where()}: no result file named")
    if not marker.rows or not marker.cols:
        raise TableError(f"{marker.where()}: give cols= and at least one row=")
    labels = {len(cells) for _, cells in marker.rows}
    if len(labels) != 1:
        raise TableError(f"{marker.where()}: the rows' labels have different numbers of cells")
    if len(marker.head) != len(marker.cols) + labels.pop():
        raise TableError(f"{marker.where()}: head has {len(marker.head)} cells, the rows "
                         f"{len(marker.rows[0][1]) + len(marker.cols)} (labels and cols)")
    for sources, _ in marker.rows:
        if len(sources) not in (1, len(marker.cols)):
            raise TableError(f"{marker.where()}: row {','.join(s for _, s, _ in sources)} has "
                             f"{len(sources)} SELECTORs, not one nor one per column "
                             f"({len(marker.cols)})")
        for index, selector, _ in sources:
            if not 0 <= index < len(marker.paths):
                raise TableError(f"{marker.where()}: row {index + 1}:{selector} names file "
                                 f"{index + 1} of {len(marker.paths)}")


def load(path: str, cache: dict) -> dict:
    """A result file's JSON (xz-compressed where it ends in `.xz`, or else the plain file of
    that name without the ending, one written before it was compressed), read once per run.
    As `datagen.grid.read_json` reads it, but with the standard library alone: CI checks the
    tables before the project is installed."""
    if path not in cache:
        if path.endswith(".xz") and not os.path.exists(path) and os.path.exists(path[:-3]):
            path_read = path[:-3]
        else:
            path_read = path
        opener = lzma.open if path_read.endswith(".xz") else open
        try:
            with opener(path_read, "rt") as f:
                cache[path] = json.load(f)
        except (OSError, ValueError, lzma.LZMAError, EOFError) as err:
            reason = err.strerror if isinstance(err, OSError) and err.strerror else err
            raise TableError(f"cannot be read ({reason})") from None
    return cache[path]


def show(item, spec: Field, none: str, spread: bool = True) -> str:
    """A figure, several, or a text as its cell shows it (`spread`: with its spread)."""
    if isinstance(item, str):
        return item
    if isinstance(item, Series):
        return item.sep.join(show(f, spec, none, spread) for f in item.figures)
    if item.value is None or not math.isfinite(item.value):
        return none
    decimals = item.decimals if spec.decimals is None else spec.decimals
    unit = "%" if spec.percent else ""
    text = f"{item.value:.{decimals}f}{unit}"
    if item.spread is not None and spread:
        text += f" ± {item.spread:.{decimals}f}{unit}"
    return text


def first_value(item) -> float | None:
    """The number a cell is compared by for bold=C: its (first) figure's value."""
    if isinstance(item, Series):
        item = item.figures[0] if item.figures else None
    if isinstance(item, Figure) and item.value is not None and math.isfinite(item.value):
        return item.value
    return None


def readers(marker: Marker, base: str, cache: dict) -> list[tuple]:
    """Per PATH of the marker: (its kind's renderer of its file, the path, the kind)."""
    found = []
    for kind, path in marker.paths:
        try:
            data = load(os.path.join(base, path), cache)
        except TableError as err:
            raise TableError(f"{marker.where()}: {path} {err}") from None
        if not isinstance(data, dict):
            raise TableError(f"{marker.where()}: {path} is not a {kind} result file")
        found.append((KINDS[kind](data), path, kind))
    return found


def figure(marker: Marker, reader: tuple, selector: str, spec: Field):
    """One FIELD of one row from its file, any error of a lookup as one line."""
    renderer, path, kind = reader
    try:
        found = renderer.figure(selector, spec.name)
    except (KeyError, IndexError, TypeError, ValueError, StopIteration):
        raise TableError(f"{marker.where()}: {path} ({kind}) has no figure {spec.name!r} of "
                         f"{selector!r}") from None
    except TableError as err:
        raise TableError(f"{marker.where()}: {err}") from None
    for item in found.figures if isinstance(found, Series) else [found]:
        if isinstance(item, Figure) and not all(
                v is None or isinstance(v, (int, float)) for v in (item.value, item.spread)):
            raise TableError(f"{marker.where()}: {path} ({kind}): {spec.name!r} of "
                             f"{selector!r} is not a number")
    return found


def embolden(marker: Marker, parts: list, values: list) -> None:
    """Set the cells (per row, per figure column, the texts of its FIELDs) that bold= names
    in bold, in place; `values`: per row and column, the number bold=C compares."""
    for row, col, part in marker.bold:
        if not 1 <= col <= len(marker.cols) or (row is not None and not 1 <= row <= len(parts)) \
                or (part is not None and not 1 <= part <= (
                    len(marker.cols[col - 1]) if row is None else len(parts[row - 1][col - 1]))):
            raise TableError(f"{marker.where()}: bold names a cell outside the table")
        if row is None:
            column = [v[col - 1] for v in values if v[col - 1] is not None]
            rows = [i for i, v in enumerate(values) if column and v[col - 1] == max(column)]
        else:
            rows = [row - 1]
        for i in rows:
            texts = parts[i][col - 1]
            for j in range(len(texts)) if part is None else [part - 1]:
                if texts[j] and not texts[j].startswith("**"):
                    texts[j] = f"**{texts[j]}**"


def render(marker: Marker, base: str, cache: dict) -> list[str]:
    """The marker's table, as Markdown lines, from its files under `base`."""
    files = readers(marker, base, cache)
    parts, values = [], []
    for sources, _ in marker.rows:
        items, specs = [], []
        for c, col in enumerate(marker.cols):
            index, selector, own = sources[c if len(sources) > 1 else 0]
            col = col[:1] if selector == NO_FIGURE else own or col  # no figure: none= once
            specs.append(col)
            items.append([Figure(None) if selector == NO_FIGURE
                          else figure(marker, files[index], selector, spec) for spec in col])
        parts.append([[show(item, spec, marker.none, c not in marker.nospread)
                       for item, spec in zip(row, col)]
                      for c, (row, col) in enumerate(zip(items, specs), 1)])
        values.append([first_value(row[0]) for row in items])
    embolden(marker, parts, values)
    cells = [list(label) + [" / ".join(texts) for texts in row]
             for (_, label), row in zip(marker.rows, parts)]
    lines = [marker.head] + [["---"] * len(marker.head)] + cells
    return ["| " + " | ".join(line) + " |" for line in lines]


def blocks(lines: list[str]):
    """Each marked table of the README: (marker, the index of its first table line, the index
    of its end line)."""
    i = 0
    while i < len(lines):
        if not lines[i].startswith(OPEN):
            i += 1
            continue
        start, close = i, i
        while CLOSE not in lines[close]:
            close += 1
            if close == len(lines):
                raise TableError(f"line {start + 1}: the marker has no closing {CLOSE}")
        text = " ".join(line.strip() for line in lines[start:close + 1])
        text = text[len(OPEN):text.index(CLOSE)]
        marker = parse_marker(text, start + 1)
        end = close + 1
        while end < len(lines) and lines[end].strip() != END:
            if lines[end].startswith(OPEN):
                raise TableError(f"{marker.where()}: a marker before its {END}")
            end += 1
        if end == len(lines):
            raise TableError(f"{marker.where()}: no {END} after it")
        yield marker, close + 1, end
        i = end + 1


def regenerate(text: str, base: str) -> tuple[str, list[Marker], int]:
    """The README's text with every marked table generated from its files, the markers whose
    tables differed, and how many tables there are."""
    lines = text.split("\n")
    out, drifted, done, count, cache = [], [], 0, 0, {}
    for marker, first, end in list(blocks(lines)):
        table = render(marker, base, cache)
        if lines[first:end] != table:
            drifted.append(marker)
        out += lines[done:first] + table
        done = end
        count += 1
    out += lines[done:]
    return "\n".join(out), drifted, count


def write_atomically(path: str, text: str) -> None:
    """Replace `path` by `text` at once: a temporary file beside it, then renamed over it."""
    folder = os.path.dirname(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".tables-", suffix=".md")
    try:
        with os.fdopen(fd, "w") as f:
            f.write(text)
        os.chmod(tmp, os.stat(path).st_mode & 0o7777)
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def main(argv: list[str] | None = None) -> int:
    kinds = "\n\n".join(f"{kind}: {inspect.cleandoc(renderer.__doc__)}"
                          for kind, renderer in KINDS.items())
    parser = argparse.ArgumentParser(description=__doc__, epilog="The kinds\n\n" + kinds,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true",
                        help="write nothing; exit 1, one line per table, if any table differs "
                        "from its files")
    parser.add_argument("--readme", action="append",
                        help="a Markdown file whose tables to generate, once or more; PATHs are "
                        "relative to its folder (default: bench/README.md and README.md)")
    args = parser.parse_args(argv)
    paths = args.readme or [os.path.relpath(path) for path in READMES]
    done = []  # per README: (its name, its text, the new text, the drifted markers, how many)
    for path in paths:
        try:
            try:
                with open(path) as f:
                    text = f.read()
            except OSError as err:
                raise TableError(f"cannot be read ({err.strerror})") from None
            new, drifted, count = regenerate(text, os.path.dirname(os.path.abspath(path)))
        except TableError as err:
            print(f"tables: error: {path}: {err}", file=sys.stderr)
            return 2
        done.append((path, text, new, drifted, count))
    if args.check:
        for path, _, _, drifted, _ in done:
            for marker in drifted:
                print(f"{path}: {marker.where()}: differs from its files (run python "
                      "bench/tables.py)")
        return 1 if any(drifted for *_, drifted, _ in done) else 0
    for path, text, new, drifted, count in done:  # every file read and rendered: now write
        if new != text:
            try:
                write_atomically(path, new)
            except OSError as err:
                print(f"tables: error: {path}: cannot be written ({err.strerror})",
                      file=sys.stderr)
                return 2
        print(f"{count} tables in {path}, {len(drifted)} rewritten")
    return 0


if __name__ == "__main__":
    sys.exit(main())
