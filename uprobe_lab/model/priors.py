"""Priors: the host recordings' measured prices, carried to the published CPUs as ratios with their spread.

The published tables cannot separate an exception's price from the handler work it comes with (every
int3 hit has one exception, one lookup and one consumer). The split is measured natively instead, by
:mod:`uprobe_lab.native.price_benches` (the consumer scan: 1/2/4/8 perf uprobe events on one site, each
running a BPF program as the published benches' consumer does; optimised vs int3 nop5; uretprobe vs
uprobe on one target; syscall-count; usermode-count; uprobe-ret; a shared vs a private futex wake for
``pin_map``: get_user_pages_fast + put_page, what the arm64 STP patch pays per page besides a kmap,
which is free on a 64-bit kernel without HIGHMEM; the two wakes' common work is priced apart as
``futex_wake``, which no published bench pays; ``uretprobe-nop-compat`` next to ``uprobe-nop-compat``, a
32-bit task's probes, whose uretprobes still return through an int3: the 6.10 return path on this kernel;
their traps are priced as ``compat_exception``, which no published bench pays either, so what the pair
carries to a published CPU is what the return path adds),
and fitted (:func:`host_profile`) into that host's price list with its posterior covariance. Three
recordings are bundled, each made on the machine it describes: ``uprobe_lab/data/host_prices_6.18.json``
(an Intel Xeon VM; the one a notebook falls back to where it cannot measure),
``host_prices_6.18_amd_epyc.json`` (an AMD EPYC VM, family 25 and kernel build fc-v1098) and
``host_prices_6.18_xeon_b.json`` (another kind of Intel Xeon VM, with AMX and kernel build fc-v1045), the
last two by the benches as the package has them. The first recording's rows were made with perf events of one
task, whose every hit takes a lock per consumer that the kernel bench's events of every task skip
(:func:`uprobe_lab.native.perf.bench_trigger_event`, which the benches use, and with which the other two
were made for v7 and v8): its ``handler`` includes it, 15-57 ns on top of a consumer's 95-123 ns on
an AMD EPYC VM.

A published CPU's prior (:func:`carried_prior`) is that host posterior scaled by ``s``, the median over
the CPU's fit rows of (published ns per hit) / (host model's ns per hit for the same bench and kernel):
the host's *ratios* between prices are what is carried, not its nanoseconds. The spread carried is the
host posterior's covariance (scaled by s^2) plus an independent :data:`TRANSFER_LOG_SD` (40%) on each
price for the change of CPU, and :data:`CROSS_ARCH_LOG_SD` (another 40%, in quadrature) when the CPU's
architecture is not the host's. Both are stated assumptions, fixed before any held-out comparison.
Each recording is carried so; the prior is their equal mixture matched to one Gaussian
(:func:`mixed_prior`): the recordings' disagreement is a measured spread of the ratios between machines.
A machine calibrated in chapter 06 that is itself one of the recordings' machines (same CPU model and
kernel build) gets a prior without that recording, so its rows do not count twice
(:func:`uprobe_lab.model.profiles.fit_with_carried_prior`).

Not carried (uninformative prior instead, said in the profile's report):

* prices of host rows a held-out row of the target's tables tests (the protocol in :mod:`uprobe_lab.model`;
  :func:`host_rows_excluded`): they are fitted without those rows, so what only they pinned is unpinned;
* ``xol_step`` when the host is virtualised and the target is not: on the recording VMs a uprobe-ret hit
  costs 8-16 us against 0.4-0.9 us for an int3 uprobe-nop (dearest on the VM that is fastest at the
  rest, so the step is no multiple of the CPU's speed), and outside uprobes a trap-flag #DB costs
  3.8-5.1 us more than an int3's #BP (``benchmarks/single_step_trap.py``, two runs on an Intel Xeon VM
  of the kind ``data/host_prices_6.18.json`` was recorded on; docs/performance.md): a cost of the
  hypervisor, which a CPU running natively does not pay. A virtual machine calibrated in chapter 06 is
  likely to pay it too, so there it is carried (with its spread, which the recordings' disagreement makes
  about as wide as no prior; a measured uprobe-ret row outweighs it).
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pandas as pd

from ..outputs import read_recording
from ..process import LabError
from .fit import UNINFORMATIVE_SD_NS, Prior, Profile, fit_profile
from .prices import PRICE_NAMES, events_for, events_rows, fixed_ns, modelled_kernel, price_counts

DATA = Path(__file__).resolve().parents[1] / "data"
HOST_PRICES_PATH = DATA / "host_prices_6.18.json"
HOST_RECORDING_PATHS = (HOST_PRICES_PATH, DATA / "host_prices_6.18_amd_epyc.json", DATA / "host_prices_6.18_xeon_b.json")
TRANSFER_LOG_SD = 0.4
CROSS_ARCH_LOG_SD = 0.4
NOT_CARRIED_VIRTUALISED = {"xol_step": "not carried: this host is virtualised and the hypervisor intercepts "
                                       "the single-step #DB trap"}
HOST_COLUMNS = ["bench", "consumers", "kernel", "release", "mops", "rel_err", "reached"]


def load_host_recording(path: str | Path = HOST_PRICES_PATH) -> dict:
    """The bundled recording: keys label, recorded, host, command, rows (price_benches rows)."""
    return read_recording(path, ("rows",), "that native.price_benches.record_host_prices(path) wrote")


def host_frame(rows: list[dict]) -> pd.DataFrame:
    """price_benches rows -> the table :func:`host_profile` fits (kernel = the modelled version)."""
    out = []
    for r in rows:
        kernel = modelled_kernel(r["kernel"])
        if kernel is None:
            raise LabError(f"kernel {r['kernel']} predates every modelled version")
        out.append({"bench": r["bench"], "consumers": int(r.get("consumers", 1) or 1), "kernel": kernel,
                    "release": r["kernel"], "mops": float(r["mops"]), "rel_err": float(r["rel_err"]),
                    "reached": bool(r.get("reached", True))})
    return pd.DataFrame(out, columns=HOST_COLUMNS)


def host_profile(rows: pd.DataFrame, arch: str = "x86_64", exclude=(), virtualised: bool = True,
                 cpu: str = "this host") -> Profile:
    """This host's prices, fitted under an uninformative prior on ``rows`` minus the ``exclude`` indices."""
    use = rows.drop(index=list(exclude))
    prof = fit_profile(use, arch, Prior.uninformative("none (host fit: the data decide)"), "host", cpu)
    prof.virtualised = virtualised
    return prof


def _same_events(a: tuple, b: tuple) -> bool:
    return events_for(*a) == events_for(*b)


def host_rows_excluded(host: pd.DataFrame, heldout_moved: list[tuple], host_arch: str = "x86_64") -> list:
    """Indices of host rows that measure a path a moved held-out row tests: the same arch and the same
    events per hit as that row (bench, arch, kernel) on its after-kernel."""
    out = []
    for i, r in host.iterrows():
        mine = (r["bench"], host_arch, r["kernel"], int(r["consumers"]))
        if any(arch == host_arch and _same_events(mine, (b, arch, k, 1)) for b, arch, k in heldout_moved):
            out.append(i)
    return out


def scale_to(host: Profile, rows: pd.DataFrame, arch: str) -> float:
    """Median of (row's ns per hit) / (host model's ns per hit for it): how much slower this CPU is."""
    codes, events = events_rows(rows[["bench", "kernel"]], arch)  # each row's one-consumer events
    # the loop and syscall rows say little about the trap and handler prices
    probe = np.array([bool(ev.get("probe_lookups")) for ev in events], bool)[codes]
    if not probe.any():
        raise LabError("no probe row (uprobe-* or uretprobe-*) to scale this host's prices to the CPU by: "
                       "measure at least uprobe-nop")
    host_ns = np.array([float(price_counts(ev) @ host.mean) + fixed_ns(ev) for ev in events])[codes]
    return float(np.median((1000.0 / rows["mops"].astype(float).to_numpy() / host_ns)[probe]))


def carried_prior(host: Profile, rows: pd.DataFrame, arch: str, target_virtualised: bool = False) -> tuple[Prior, float]:
    """The prior for a CPU with fit rows ``rows`` on ``arch``: host prices times s, with spread.
    ``target_virtualised``: that CPU runs under a hypervisor too, so a virtualised host's xol_step carries."""
    s = scale_to(host, rows, arch)
    mean = s * host.mean
    cov = s * s * host.cov
    log_sd = math.hypot(TRANSFER_LOG_SD, CROSS_ARCH_LOG_SD if arch != host.arch else 0.0)
    cov = cov + np.diag((log_sd * np.abs(mean)) ** 2)
    sd = np.sqrt(np.diag(host.cov))
    prior = Prior(mean, cov, {p: (f"host {host.mean[i]:.1f} +- {sd[i]:.1f} ns x {s:.3f}, "
                                  f"+-{100 * log_sd:.0f}% for the change of CPU") for i, p in enumerate(PRICE_NAMES)})
    skip = dict(NOT_CARRIED_VIRTUALISED) if host.virtualised and not target_virtualised else {}
    for i, p in enumerate(PRICE_NAMES):
        if p in skip or sd[i] > 0.5 * UNINFORMATIVE_SD_NS:
            prior.leave_uninformative(i, skip.get(p, "not carried: no host row left to measure it"))
    return prior, s


def mixed_prior(parts: list[Prior], labels: list[str]) -> Prior:
    """One Gaussian for the equal mixture of several recordings' carried priors (moment matching):
    mean = the parts' mean, cov = the parts' mean covariance + the variance of their means, per price.
    The means' full covariance is left out: from two machines it has rank one and would tie every price
    to every other (a dearer user instruction would mean a dearer trap).

    A price one part leaves uncarried takes, in that part, the mean and variance of the parts that carry
    it (uncorrelated with its other prices); a price no part carries stays uninformative (every part's
    mean 0 and sd UNINFORMATIVE_SD_NS mix to the same)."""
    if not parts or len(parts) != len(labels) or len(set(labels)) != len(labels):
        raise LabError(f"mixed_prior needs one distinct label per part, got {len(parts)} parts and labels {labels}")
    if len(parts) == 1:
        return parts[0]
    n = len(PRICE_NAMES)
    has = np.array([p.carried for p in parts])
    means = np.array([p.mean for p in parts], float)
    covs = np.array([p.cov for p in parts], float)
    for i in range(n):
        if has[:, i].all() or not has[:, i].any():
            continue
        fill_mean, fill_var = means[has[:, i], i].mean(), covs[has[:, i], i, i].mean()
        for k in np.flatnonzero(~has[:, i]):
            means[k, i] = fill_mean
            covs[k, i, :] = covs[k, :, i] = 0.0
            covs[k, i, i] = fill_var
    mean = means.mean(axis=0)
    dev = means - mean
    cov = covs.mean(axis=0) + np.diag((dev ** 2).mean(axis=0))
    source = {}
    for i, p in enumerate(PRICE_NAMES):
        filled = ", so it takes the others'" if has[:, i].any() else ""
        source[p] = "; ".join(f"{label}: {part.source[p]}{'' if has[k, i] else filled}"
                              for k, (label, part) in enumerate(zip(labels, parts)))
    return Prior(mean, (cov + cov.T) / 2, source, has.any(axis=0))
