"""The views of a program the cost model reads, one module each, and their registry `VIEWS`.

A view is what one featurisation gives of a scheduled program: the typed graph of its lowered
TIR (`graph`, the base view every model reads), its whole-program features (`program`), and the
optional ones a model may read beside them: MetaSchedule's per-store features (`store`), the
schedule's trace as tokens (`trace`) and each node's warp access features (`warp`). Each module
of this package declares its view as one module-level `View`: its place among the others, its
version, sizes, the arrays it adds to a `ProgramGraph`, how they are extracted and cached, what
the normalisation keeps of them, what a checkpoint records and checks, and the model's encoder
of them. `VIEWS` is every module's view, found when the package is imported, in `order`; the
featuriser, the normalisation, the checkpoint checks, the model and the training data loop
over it, and training names the optional views a model reads (`model.views`). So a new view is
its module here and its test.

The names a view declares are the ones checkpoints and feature caches already use
(`store_features`, `store_mean`, `num_store_features`, `STORE_FEATURES_VERSION/KIND/<key>.npy`):
they are part of the checkpoint format, not derived from the view's name.
"""

from __future__ import annotations

import dataclasses
import importlib
import pkgutil
from collections.abc import Callable
from pathlib import Path


@dataclasses.dataclass(frozen=True, eq=False)
class View:
    """One view of a program: what it is, and what each part of the cost model does with it.

    Args:
        name: the view's name (what training's `views` lists).
        order: its place in `VIEWS` (lowest first): the order of the model's inputs, of the
            node features the normalisation appends and of a checkpoint's entries, so a new
            view takes a number above the others'.
        version: the layout of its features; a new layout is a new version (and, for a cached
            view, a new cache folder).
        sizes: its architecture arguments and their sizes here (`num_store_features`: 164);
            the first is non-zero in every architecture that reads the view. A checkpoint
            whose sizes differ is refused.
        rows: the `ProgramGraph` (and Data) array the normalisation standardises.
        statistics: the normalisation's keys of that array's mean and standard deviation
            (`Normalization` attributes and checkpoint keys).
        arrays: an optional view's `ProgramGraph` arrays, `rows` among them (None on a graph
            featurised without the view); `to_pyg` carries them to the Data by these names.
        count: the Data attribute of the number of `rows` of a graph, for rows that are not
            one per node (batches concatenate rows; the counts say which graph each is of).
        label: what the view's features are called in messages ("store features").
        key: an optional view's checkpoint entry of its `version`, written when the
            architecture reads the view; older training named the view by `use_KEY` (its
            hyperparameter in older checkpoints, `costmodel.checkpoint.current_hparams`).
        flag: the `Featurizer` keyword that adds the view (`stores=True`).
        from_module: extracts the arrays from a scheduled IRModule and its target (in the
            lowering threads).
        from_trace: extracts the arrays from the schedule's trace (JSON text) instead.
        from_walk: extracts the arrays from what the graph walker met on its walk of the
            lowered program instead: its number of nodes and its accesses
            (`costmodel.graph_walker.Access`).
        cached: the featuriser's disk cache keeps `rows` beside each graph, as
            `cache_dir/version/KIND/<key>.npy` (`folder`).
        layout: a base view's checkpoint entries that must equal these
            (`costmodel.checkpoint.LAYOUT`).
        units: what each of `sizes` counts, in messages ("per store").
        verb: what this version does to get the features, in messages ("extracts").
        node_features: its rows are more node features: the normalisation appends them to
            `x`, and the model's node projection widens by the first of `sizes`.
        encoder: builds the model's submodule for the view from `hidden` and the view's
            architecture arguments (`arguments`); the submodule's `width` is what it adds to
            the readout, and its inputs are the Data attributes `inputs`.
        module: the model attribute the encoder lives under (its weights' prefix in
            checkpoints: never rename it).
        options: other architecture arguments of the encoder, counts of at least 1 with
            their defaults (`trace_layers`: 1), recorded beside `sizes`; training sets them
            by name (`model.view_options`).
    """

    name: str
    order: int
    version: str
    sizes: dict[str, int]
    rows: str
    statistics: tuple[str, str]
    arrays: tuple[str, ...] = ()
    count: str | None = None
    label: str = ""
    key: str | None = None
    flag: str | None = None
    from_module: Callable | None = None
    from_trace: Callable | None = None
    from_walk: Callable | None = None
    cached: bool = False
    layout: dict = dataclasses.field(default_factory=dict)
    units: tuple[str, ...] = ()
    verb: str = "makes"
    node_features: bool = False
    encoder: Callable | None = None
    module: str | None = None
    options: dict[str, int] = dataclasses.field(default_factory=dict)

    def reads(self, architecture: dict) -> bool:
        """Whether a model of `architecture` (or these architecture arguments) reads the view."""
        return bool(architecture.get(next(iter(self.sizes))))

    def arguments(self, given: dict) -> dict:
        """The view's architecture arguments as a model records them: its sizes as `given`
        (0 if not), then its options as given or their defaults."""
        return {**{k: given.get(k, 0) for k in self.sizes},
                **{k: given.get(k, default) for k, default in self.options.items()}}

    @property
    def inputs(self) -> tuple[str, ...]:
        """The Data attributes of the view in a batch: its arrays, then its count."""
        return (*self.arrays, *((self.count,) if self.count else ()))

    def folder(self, cache_dir: str | Path, kind: str) -> Path:
        """Where a featuriser's cache keeps the view's rows for targets of `kind`."""
        return Path(cache_dir) / self.version / kind


def optional() -> list[View]:
    """The views a featuriser adds only when asked (those with a `flag`), in `VIEWS` order."""
    return [view for view in VIEWS if view.flag]


def encoded() -> list[View]:
    """The views with an encoder of their own in the model, in `VIEWS` order: the order of
    their inputs after the program features (`costmodel.model.batch_inputs`)."""
    return [view for view in VIEWS if view.encoder]


def named(names: list[str] | None) -> list[View]:
    """The optional views called `names` (training's `views`), in `VIEWS` order.

    Raises:
        UserError: a name that is no optional view's, with the names there are.
    """
    from datagen.errors import UserError

    names = list(names or [])
    there = [view.name for view in optional()]
    if unknown := [name for name in names if name not in there]:
        raise UserError(f"unknown view {unknown[0]!r}; the views a model may read: "
                        f"{', '.join(there)}")
    return [view for view in optional() if view.name in names]


def _discover() -> list[View]:
    """Every `View` this package's modules declare, each once, in `order`."""
    found: dict[int, View] = {}
    for module in pkgutil.iter_modules(__path__):
        attributes = vars(importlib.import_module(f"{__name__}.{module.name}")).values()
        found.update((id(view), view) for view in attributes if isinstance(view, View))
    return sorted(found.values(), key=lambda view: (view.order, view.name))


# the registry, in the order of the model's inputs and the checkpoints' entries
VIEWS: list[View] = _discover()
# the shipped views by name, for the code that reads one in particular (a new view needs none)
from costmodel.views import graph, program, store, trace, warp  # noqa: E402

GRAPH, PROGRAM, STORE, TRACE, WARP = graph.GRAPH, program.PROGRAM, store.STORE, trace.TRACE, \
    warp.WARP
