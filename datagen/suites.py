"""Names to workloads: the registry's suites (`datagen.workloads.SUITES`), those of the shipped
network catalogue (`datagen.networks`), and workload keys, as the command lines take them."""

from __future__ import annotations

import difflib

from datagen.errors import UserError
from datagen.networks import network_suites
from datagen.workloads import FAMILIES, SUITES, Workload, from_key


def _unknown(kind: str, name: str, known) -> UserError:
    close = difflib.get_close_matches(name, list(known), n=1)
    hint = f" (did you mean {close[0]!r}?)" if close else ""
    return UserError(f"unknown {kind} {name!r}{hint}; see 'datagen workloads' for the list")


def all_suites() -> dict[str, list[Workload]]:
    """The registry's suites and those of the shipped network catalogue (`net-NAME`,
    `networks`; see `datagen.networks`)."""
    return {**SUITES, **network_suites()}


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
        elif name in known:
            items = [known[name]]
        elif name.partition("/")[0] in FAMILIES and "/" in name:
            items = [from_key(name)]
        else:
            raise _unknown("workload or suite", name, list(known) + list(suites))
        for w in items:
            out.setdefault(w.key, w)
    return list(out.values())
