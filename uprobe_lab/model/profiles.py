"""The published rows with their roles, and a fitted profile per CPU (or per seed table).

A profile is fitted on before rows only; its prior is the host recordings' prices carried across
(:mod:`.priors`), with the host rows that measure a path any of the CPU's moved held-out rows test left
out of each host fit (protocol rule 2 in :mod:`uprobe_lab.model`).
"""
from __future__ import annotations

import functools

import numpy as np
import pandas as pd

from ..arches import get_arch
from ..errors import shown
from ..process import LabError
from ..published import OUTSIDE_SEEDS, VARIANT_PAIRS, load_published, source_label
from .fit import Profile, fit_profile
from .prices import events_for
from .priors import (HOST_RECORDING_PATHS, carried_prior, host_frame, host_profile, host_rows_excluded,
                     load_host_recording, mixed_prior)

# profile -> (cpu as the seeds name it, arch)
PROFILES = {
    "intel-i7-1165g7": ("Intel i7-1165G7", "x86_64"),
    "amd-ryzen7-5700u": ("AMD Ryzen 7 5700U", "x86_64"),
    "nop5-machine": ("unspecified (x86-64)", "x86_64"),
    "kunpeng916": ("Kunpeng916", "arm64"),
}
PROFILE_ALIASES = {"intel": "intel-i7-1165g7", "amd": "amd-ryzen7-5700u", "nop5": "nop5-machine",
                   "kunpeng": "kunpeng916"}
ROLE_FIT, ROLE_HELDOUT = "fit", "heldout"
BEFORE_VARIANTS = {b for b, _ in VARIANT_PAIRS} | {"no-uprobe"}


def profile_names(arch: str | None = None) -> list[str]:
    return [n for n, (_, a) in PROFILES.items() if arch is None or a == arch]


def duplicate_tables(df: pd.DataFrame) -> dict:
    """(source, table) -> the first (source, table), in file-name order, whose figures it repeats exactly,
    whatever either calls its CPU and columns (seed 004 -> 003; a seed's digits sort before any other name)."""
    seen, out = {}, {}
    for key, grp in df.groupby(["source", "table"], sort=True):
        figures = frozenset(zip(grp["bench"], grp["value"], grp["pm"].fillna(-1.0)))
        if figures in seen:
            out[key] = seen[figures]
        else:
            seen[figures] = key
    return out


LEFT_OUT = "left out:"  # a note that keeps a published row out of every evaluation, with its reason


def _with_roles(df: pd.DataFrame) -> pd.DataFrame:
    rows = df[(df["unit"] == "M/s") & ~df["note"].fillna("").str.startswith(LEFT_OUT)].copy()
    rows["role"] = np.where(rows["variant"].isin(BEFORE_VARIANTS), ROLE_FIT, ROLE_HELDOUT)
    rows["rel_err"] = (rows["pm"] / rows["value"]).fillna(0.0)
    return rows


def _duplicate_label(dups: dict, key: tuple) -> str:
    return f"{source_label(dups[key][0])} {dups[key][1]}" if key in dups else ""


def bench_rows() -> pd.DataFrame:
    """Published M/s rows with ``role`` (fit: before variants; heldout: after variants), ``rel_err``
    (the seed's +- over its figure, 0 where none) and ``duplicate_of`` ("" unless the table repeats one)."""
    rows = _with_roles(load_published())
    dups = duplicate_tables(rows)
    rows["duplicate_of"] = [_duplicate_label(dups, k) for k in zip(rows["source"], rows["table"])]
    return rows


def outside_rows() -> pd.DataFrame:
    """The rows of the tables posted outside the seeds (protocol rule 8), as :func:`bench_rows` gives
    them, without the rows noted ``left out``; a table that repeats a seed table's figures, or an outside
    one's, is marked as :func:`duplicate_tables` finds it."""
    seeds, outside = bench_rows(), _with_roles(load_published(OUTSIDE_SEEDS))
    dups = duplicate_tables(pd.concat([seeds, outside], ignore_index=True))
    outside["duplicate_of"] = [_duplicate_label(dups, k) for k in zip(outside["source"], outside["table"])]
    return outside


def moved_heldout(rows: pd.DataFrame) -> list[tuple]:
    """(bench, arch, after-kernel) of the held-out rows in ``rows`` whose events per hit differ from their
    before row's: the rows that test a prediction."""
    out = []
    for (source, table, bench), grp in rows.groupby(["source", "table", "bench"], sort=False):
        before = grp[grp["role"] == ROLE_FIT]
        if before.empty:
            continue
        arch, k0 = before["arch"].iloc[0], str(before["kernel"].iloc[0])
        for r in grp[grp["role"] == ROLE_HELDOUT].itertuples(index=False):
            if events_for(bench, arch, str(r.kernel)) != events_for(bench, arch, k0):
                out.append((bench, arch, str(r.kernel)))
    return out


def machine_label(host: dict) -> str:
    """A machine as the recordings name it: CPU model and kernel release (``uname -r``, which names the
    build on the lab's VMs). Two kinds of VM share a CPU model, and two CPU models a release: an Intel and an
    AMD VM both ran 6.18.44-fc-v1045."""
    return f"{host['cpu_model']}, {host['kernel']}"


@functools.lru_cache(maxsize=None)
def recorded_hosts() -> tuple[tuple[pd.DataFrame, bool, str], ...]:
    """The bundled host recordings, each as (rows, virtualised, :func:`machine_label`)."""
    out = []
    for path in HOST_RECORDING_PATHS:
        rec = load_host_recording(path)
        out.append((host_frame(rec["rows"]), bool(rec["host"].get("virtualized")), machine_label(rec["host"])))
    return tuple(out)


def fit_with_carried_prior(fit_rows: pd.DataFrame, arch: str, moved: list[tuple], name: str, cpu: str,
                           target_virtualised: bool = False, machine: str = "") -> Profile:
    """A profile on ``fit_rows`` whose prior mixes the host recordings' prices, each fitted without the host
    rows ``moved`` tests (:func:`.priors.mixed_prior`), one part per recording (:func:`recorded_hosts`).
    ``target_virtualised``: the fitted machine runs under a hypervisor (:func:`.priors.carried_prior`).
    ``machine``: the :func:`machine_label` of the machine ``fit_rows`` were measured on; a recording of that
    machine is left out of the prior, since its rows would count twice, once as prior and once as data
    (``profile.recordings_left_out`` names it)."""
    hosts = [h for h in recorded_hosts() if h[2] != machine]
    if not hosts:
        raise LabError(f"every host recording is of {machine}, the machine being fitted: no prior is left")
    parts, labels, scales, excluded_names = [], [], {}, set()
    for host_rows, virtualised, label in hosts:
        excluded = host_rows_excluded(host_rows, moved)
        hp = host_profile(host_rows, exclude=excluded, virtualised=virtualised)
        prior, scales[label] = carried_prior(hp, fit_rows, arch, target_virtualised)
        parts.append(prior)
        labels.append(label)
        excluded_names |= {f"{host_rows.loc[i, 'bench']} x{host_rows.loc[i, 'consumers']}" for i in excluded}
    cols = [c for c in ("bench", "kernel", "consumers", "mops", "rel_err") if c in fit_rows.columns]
    prof = fit_profile(fit_rows[cols], arch, mixed_prior(parts, labels), name, cpu)
    prof.scales = scales
    prof.host_excluded = sorted(excluded_names)
    prof.recordings_left_out = [label for *_, label in recorded_hosts() if label == machine]
    return prof


def profile_fit_rows(name: str) -> pd.DataFrame:
    """The rows a published profile is fitted on: its CPU's before rows, from non-duplicate tables."""
    cpu, _ = PROFILES[name]
    rows = bench_rows()
    rows = rows[(rows["cpu"] == cpu) & (rows["role"] == ROLE_FIT) & (rows["duplicate_of"] == "")]
    return rows.rename(columns={"value": "mops"})


@functools.lru_cache(maxsize=None)
def _profile(name: str) -> Profile:
    cpu, arch = PROFILES[name]
    rows = bench_rows()
    mine = rows[(rows["cpu"] == cpu) & (rows["duplicate_of"] == "")]
    return fit_with_carried_prior(profile_fit_rows(name), arch, moved_heldout(mine), name, cpu)


def clear_profiles() -> None:
    _profile.cache_clear()
    recorded_hosts.cache_clear()


def get_profile(name: str | None = None, arch: str = "x86_64") -> Profile:
    """A published CPU's profile, fitted on its before rows (``intel``, ``amd``, ``nop5``, ``kunpeng``...)."""
    if name is None:
        name = profile_names(get_arch(arch).name)[0]
    key = PROFILE_ALIASES.get(name.lower(), name.lower()) if isinstance(name, str) else None
    if key not in PROFILES:
        raise LabError(f"unknown CPU profile {shown(name)}; known: {', '.join(PROFILES)} (for short: "
                       f"{', '.join(PROFILE_ALIASES)})")
    return _profile(key)


def fit_report(name: str) -> pd.DataFrame:
    """The fitted prices of a profile (mean, sd) next to their priors and where each prior came from."""
    return get_profile(name).report()
