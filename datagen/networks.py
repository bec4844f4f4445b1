"""Workloads from real networks: the MetaSchedule tasks of PyTorch model definitions.

Each network of `NETWORKS` (listed as data in `network_definitions.json`: a name, the model and
configuration classes, the configuration values set) is a Hugging Face `transformers` model
definition built from its configuration with random weights (nothing is downloaded), exported with `torch.export` at two
input sizes (`Network.inputs`: two resolutions or two sequence lengths, batch 1; two batch
sizes where the resolution is fixed), imported into relax and split into the fused tasks MetaSchedule tunes
(`datagen.torch_import`). Tasks are deduplicated across networks and input sizes by structural
hash, and each one remembers every (network, input, weight) it came from.

Extraction needs the optional `networks` extra (transformers) and minutes of CPU, so its
result is kept in a catalogue, an xz-compressed JSON-lines file shipped with the package
(`CATALOG`): `datagen collect net-resnet50`, `datagen collect networks` (every task) or
`datagen collect networks-anchored` (leaving out purely elementwise tasks) read it and need
no model code at all. `datagen networks --extract` rebuilds it.

    datagen networks                         # the networks and their task counts
    datagen networks --extract [NAME ...]    # (re-)extract networks into the catalogue
                                             # (pip install -e ".[networks]")
"""

from __future__ import annotations

import dataclasses
import functools
import gzip
import json
import lzma
import os
import sys
from collections.abc import Callable

from datagen.errors import UserError, atomic_path
from datagen.torch_import import relax_module, task_family, task_pattern
from datagen.workloads import Workload

CATALOG = os.path.join(os.path.dirname(__file__), "network_tasks.jsonl.xz")
SUITE_PREFIX = "net-"
ALL_SUITE = "networks"
# every task with an anchor operator (convolution, matmul, normalisation, softmax, pooling,
# reduction, gather): the purely elementwise ones (reshapes, transposes, activations) left out
ANCHORED_SUITE = "networks-anchored"
ELEMENTWISE = "elementwise"
VISION_SIZES = (224, 160)  # input resolutions of the vision networks (batch 1)
TEXT_LENGTHS = (128, 64)  # sequence lengths of the language models (batch 1)
FIXED_SIZE_BATCH = 4  # second batch size of vision networks whose resolution is fixed


@dataclasses.dataclass(frozen=True)
class Network:
    """A model definition and the inputs it is exported with.

    Args:
        name: the network's name in suites and records.
        build: makes the `torch.nn.Module` (random weights, eval mode is set by the caller).
        inputs: one entry per variant: (variant name, example input builder).
        requires: the package whose model definition it is (checked before extracting).
    """

    name: str
    build: Callable
    inputs: tuple[tuple[str, Callable], ...]
    requires: str = "transformers"


def _first_output(model):
    """Wrap a Hugging Face model so that export sees one tensor out (no caches, no dicts)."""
    import torch

    class FirstOutput(torch.nn.Module):
        def __init__(self, inner):
            super().__init__()
            self.inner = inner

        def forward(self, x):
            return self.inner(x, return_dict=False)[0]

    return FirstOutput(model)


def _hf(model_cls: str, config_cls: str, **config) -> Callable:
    def build():
        import transformers

        cfg = getattr(transformers, config_cls)(**config)
        if hasattr(cfg, "use_cache"):
            cfg.use_cache = False
        return _first_output(getattr(transformers, model_cls)(cfg))
    return build


def _image(size: int, batch: int = 1) -> tuple[str, Callable]:
    def make():
        import torch

        return (torch.randn(batch, 3, size, size),)
    return f"{batch}x3x{size}x{size}", make


def _tokens(length: int, vocab: int = 1000) -> tuple[str, Callable]:
    def make():
        import torch

        return (torch.randint(0, vocab, (1, length)),)
    return f"1x{length}", make


def _vision(name, model_cls, config_cls, fixed_size: int | None = None, **config) -> Network:
    """A vision network at the two `VISION_SIZES`, or, for one whose position embeddings fix
    the resolution, at `fixed_size` with batch 1 and `FIXED_SIZE_BATCH`."""
    inputs = tuple(_image(s) for s in VISION_SIZES) if fixed_size is None else \
        (_image(fixed_size), _image(fixed_size, FIXED_SIZE_BATCH))
    return Network(name, _hf(model_cls, config_cls, **config), inputs)


def _text(name, model_cls, config_cls, **config) -> Network:
    return Network(name, _hf(model_cls, config_cls, **config),
                   tuple(_tokens(n) for n in TEXT_LENGTHS))


DEFINITIONS = os.path.join(os.path.dirname(__file__), "network_definitions.json")


def _definitions(path: str = DEFINITIONS) -> dict[str, Network]:
    """The networks of a definitions file (data: names and configuration values only)."""
    with open(path, encoding="utf-8") as f:
        entries = json.load(f)["networks"]
    networks = {}
    for e in entries:
        config = e.get("config", {})
        if e["kind"] == "vision":
            net = _vision(e["name"], e["model"], e["config_class"], e.get("fixed_size"), **config)
        else:
            net = _text(e["name"], e["model"], e["config_class"], **config)
        networks[net.name] = net
    return networks


# Hugging Face configurations of published architectures (`network_definitions.json`: their
# defaults are the base models unless set there); random weights, inference graphs, batch 1.
NETWORKS: dict[str, Network] = _definitions()


def extract_network(network: Network, target) -> list[tuple[int, str, object, int, str]]:
    """The tasks of every input variant of one network: (structural hash, task name, IRModule,
    weight, variant)."""
    import torch
    import tvm_ffi
    from tvm.s_tir import meta_schedule as ms

    torch.manual_seed(0)
    model = network.build().eval()
    out = []
    for variant, make_inputs in network.inputs:
        with torch.no_grad():
            program = torch.export.export(model, make_inputs())
        for task in ms.relax_integration.extract_tasks(relax_module(program, target), target):
            mod = task.dispatched[0]
            out.append((int(tvm_ffi.structural_hash(mod)), str(task.task_name), mod,
                        int(task.weight), variant))
    return out


XZ_PRESET = 9 | lzma.PRESET_EXTREME  # the shipped catalogue: 0.67 MB, where preset 6 gave 0.92


def _open(path: str, mode: str):
    """A catalogue file as text: xz-compressed (`.xz`, the shipped one: the task IRs repeat
    across megabytes, beyond gzip's window; written at `XZ_PRESET`) or gzipped (any other
    name)."""
    if path.endswith(".xz"):
        return lzma.open(path, mode, encoding="utf-8",
                         **({"preset": XZ_PRESET} if "w" in mode else {}))
    return gzip.open(path, mode, encoding="utf-8")


def _read_entries(path: str) -> tuple[dict, list[dict]]:
    """The header and task entries of a catalogue file."""
    try:
        with _open(path, "rt") as handle:
            lines = [json.loads(line) for line in handle if line.strip()]
    except (OSError, ValueError) as err:
        raise UserError(f"network catalogue {path} is unreadable ({err}); rebuild it with "
                        "'datagen networks --extract'") from None
    header = next((e["catalog"] for e in lines if "catalog" in e), {})
    return header, [e for e in lines if "catalog" not in e]


def extract(names: list[str], target, path: str = CATALOG, progress: bool = True,
            registry: dict[str, Network] | None = None) -> dict:
    """Extract the tasks of `names` (of `registry`, default `NETWORKS`) into the catalogue at
    `path`: tasks are deduplicated by structural hash across networks and inputs, and the
    sources of `names` replace what the catalogue held for them (other networks are kept).

    A network that fails to build, export or import is reported on stderr and left as it
    was; the others are written. Returns {"tasks": the catalogue's distinct tasks,
    "networks": how many networks it holds, "failed": {network: reason}}.

    Raises:
        UserError: an unknown network, or a model package that is not installed.
    """
    import importlib

    import tvm
    from tqdm import tqdm

    from datagen.tvm_env import load_tensor_intrinsics, target_json

    registry = NETWORKS if registry is None else registry
    unknown = [n for n in names if n not in registry]
    if unknown:
        raise UserError(f"unknown network(s) {', '.join(unknown)}; networks: "
                        f"{', '.join(registry)}")
    for package in sorted({registry[n].requires for n in names}):
        try:
            importlib.import_module(package)
        except Exception as err:  # noqa: BLE001  (a broken install raises more than ImportError)
            raise UserError(f"extracting networks needs {package}, which does not import "
                            f"({type(err).__name__}: {err}); pip install -e '.[networks]'") \
                from None
    load_tensor_intrinsics(target.kind.name)
    header, entries = _read_entries(path) if os.path.isfile(path) else ({}, [])
    tasks: dict[str, dict] = {e["hash"]: e for e in entries}
    failed: dict[str, str] = {}
    for name in tqdm(names, desc="networks", unit="net", disable=not progress, file=sys.stderr):
        try:
            found = extract_network(registry[name], target)
        except Exception as err:  # noqa: BLE001  (model code, export and import raise anything)
            failed[name] = f"{type(err).__name__}: {str(err).strip().splitlines()[0][:200]}"
            print(f"datagen: network {name} failed, left as it was: {failed[name]}",
                  file=sys.stderr)
            continue
        for entry in tasks.values():  # this network's old sources give way to the new ones
            entry["sources"] = [s for s in entry["sources"] if s["network"] != name]
        for digest, task_name, mod, weight, variant in found:
            key = f"{digest:016x}"
            entry = tasks.get(key)
            if entry is None:
                entry = tasks[key] = {
                    "hash": key, "name": f"{task_pattern(task_name)[:60]}_{key}",
                    "family": task_family(task_name, mod), "ir": tvm.ir.save_json(mod),
                    "sources": []}
            entry["sources"].append({"network": name, "input": variant, "weight": weight})
    entries = sorted((e for e in tasks.values() if e["sources"]), key=lambda e: e["name"])
    networks = sorted({s["network"] for e in entries for s in e["sources"]})
    header = {"target": target_json(target), "networks": networks}
    with atomic_path(path, os.path.splitext(path)[1]) as tmp, _open(tmp, "wt") as handle:
        handle.write(json.dumps({"catalog": header}) + "\n")
        for entry in entries:
            handle.write(json.dumps(entry, sort_keys=True) + "\n")
    load_catalog.cache_clear()
    return {"tasks": len(entries), "networks": len(networks), "failed": failed}


def _workload(entry: dict) -> Workload:
    sources = tuple((s["network"], s["input"], int(s["weight"])) for s in entry["sources"])
    networks = sorted({s[0] for s in sources})
    return Workload(entry["family"], (), network=",".join(networks),
                    weight=sum(s[2] for s in sources), ir_json=entry["ir"], name=entry["name"],
                    sources=sources)


@functools.lru_cache(maxsize=4)
def load_catalog(path: str = CATALOG) -> list[Workload]:
    """The workloads of a catalogue file (none if it does not exist)."""
    if not os.path.isfile(path):
        return []
    try:
        return [_workload(e) for e in _read_entries(path)[1]]
    except (KeyError, TypeError) as err:
        raise UserError(f"network catalogue {path} is malformed ({err}); rebuild it with "
                        "'datagen networks --extract'") from None


def network_suites(path: str = CATALOG) -> dict[str, list[Workload]]:
    """`net-NAME` for every network of the catalogue, `networks` for all of its tasks and
    `networks-anchored` for those with an anchor operator."""
    workloads = load_catalog(path)
    if not workloads:
        return {}
    suites: dict[str, list[Workload]] = {
        ALL_SUITE: list(workloads),
        ANCHORED_SUITE: [w for w in workloads if w.family != ELEMENTWISE]}
    for w in workloads:
        for net in w.network.split(","):
            suites.setdefault(SUITE_PREFIX + net, []).append(w)
    return suites
