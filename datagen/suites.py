"""Names to workloads: the registry's suites (`datagen.workloads.SUITES`), those of the shipped
network catalogue (`datagen.networks`), the generated ones (`datagen.generator`), slices of
any suite (`generated[0:500]`: its workloads 0 to 499), and workload keys, as the command lines
take them."""

from __future__ import annotations

import difflib
import re

from datagen.errors import UserError
from datagen.generator import generated_suites
from datagen.networks import network_suites
from datagen.workloads import FAMILIES, SUITES, Workload, from_key


def _unknown(kind: str, name: str, known) -> UserError:
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return UserError(f"unknown {kind} {name!r}{hint}; see 'datagen workloads' for the list")


def all_suites() -> dict[str, list[Workload]]:
    """The registry's suites, those of the shipped network catalogue (`net-NAME`,
    `networks`; see `datagen.networks`) and the generated ones (`datagen.generator`)."""
    return {**SUITES, **network_suites(), **generated_suites()}


_SLICE = re.compile(r"^(?P<suite>[^\[\]]+)\[(?P<start>\d*):(?P<stop>\d*)\]$")


def _sliced(name: str, suites: dict[str, list[Workload]]) -> list[Workload] | None:
    """The workloads of 'SUITE[START:STOP]', None if `name` is not of that form."""
    match = _SLICE.match(name)
    if match is None:
        return None
    if match["suite"] not in suites:
        raise _unknown("suite", match["suite"], suites)
    items = suites[match["suite"]]
    start = int(match["start"] or 0)
    stop = int(match["stop"]) if match["stop"] else len(items)
    if not start < min(stop, len(items)):
        raise UserError(f"{name}: an empty slice ({match['suite']} has {len(items)} "
                        "workloads)")
    return items[start:stop]


def get_suite(name: str) -> list[Workload]:
    """The workloads of a named suite."""
    suites = all_suites()
    if name not in suites:
        raise _unknown("suite", name, suites)
    return list(suites[name])


def resolve(names: list[str]) -> list[Workload]:
    """Turn workload keys and suite names into workloads, in order, without duplicates."""
    suites = all_suites()
    known = {w.key: w for suite in suites.values() for w in suite}
    out: dict[str, Workload] = {}
    for name in names:
        if name in suites:
            items = suites[name]
        elif (part := _sliced(name, suites)) is not None:
            items = part
        elif name in known:
            items = [known[name]]
        elif name.partition("/")[0] in FAMILIES and "/" in name:
            items = [from_key(name)]
        else:
            raise _unknown("workload or suite", name, list(known) + list(suites))
        for w in items:
            out.setdefault(w.key, w)
    return list(out.values())
