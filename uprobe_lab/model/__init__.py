"""A cost model: prices per event kind, counts from the emulator, checked against the published tables.

An emulator cannot time a kernel, but it counts exactly what each hit costs. A *profile* is one CPU's
price list (ns per priced event, :mod:`.prices`) as a posterior with a covariance (:mod:`.fit`), so every
predicted figure carries an interval. Priors come from native measurements on the lab's hosts (three
recordings, three machines), carried to the published CPUs as ratios with their spread (:mod:`.priors`). The modules:

``prices``        priced kinds, per-hit counts from the emulator, release strings -> modelled kernels
``fit``           the Gaussian posterior (Bayesian linear regression) and predictive intervals
``priors``        the host recordings' measured prices and how they become a published CPU's prior
``profiles``      the published rows, their roles, and one profile per CPU (or per table)
``evaluation``    the protocol of docs/model.md, in code: reproduction, moved/unmoved rows, the headline figures
``applications``  Redis requests and grep lines (seed 001)
``text``          tables and text for the CLI (bench --mode model, reproduce, predict)
``contention``    many CPUs: a throughput curve from the shared lines the emulator counts (docs/model.md, "Many CPUs")

The evaluation protocol (rules 1-8, fixed before the figures it produces were looked at), the current
figures and every version's reason are in docs/model.md.
"""
from __future__ import annotations

from ..process import LabError
from .applications import APP_MODEL, app_predictions
from .evaluation import (REPRO_COLUMNS, ROLE_FIT, ROLE_MOVED, ROLE_UNMOVED, coverage_tail, error_summary, headline,
                         headline_text, moved_rows, outside_seeds_alone, per_table_alone, reproduction,
                         targets_met, targets_text)
from .fit import PLAUSIBLE_NS, ROW_SIGMA_FLOOR, Z80, Prior, Profile, fit_profile, mops_interval
from .prices import (ARM64_KERNEL, ARM64_STP, BENCH_ALIASES, FIXED_PRICES, PRICE_NAMES, PRICES, breakdown, clear_cache,
                     events_for, fixed_ns, hit_ns, kernel_setup, modelled_kernel, price_counts)
from .priors import TRANSFER_LOG_SD, carried_prior, host_frame, host_profile, load_host_recording, mixed_prior
from .profiles import (BEFORE_VARIANTS, PROFILES, bench_rows, fit_report, get_profile, outside_rows,
                       profile_fit_rows, profile_names, recorded_hosts)
from .text import format_comparison, model_table, predict_from_measured

__all__ = [n for n in dir() if not n.startswith("_")]
