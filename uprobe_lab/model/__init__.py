"""A cost model: prices per event kind, counts from the emulator, checked against the published tables.

An emulator cannot time a kernel, but it counts exactly what each hit costs. A *profile* is one CPU's
price list (ns per priced event, :mod:`.prices`) as a posterior with a covariance (:mod:`.fit`), so every
predicted figure carries an interval. Priors come from native measurements on the lab's hosts (two
recordings, two machines), carried to the published CPUs as ratios with their spread (:mod:`.priors`). The modules:

``prices``        priced kinds, per-hit counts from the emulator, release strings -> modelled kernels
``fit``           the Gaussian posterior (Bayesian linear regression) and predictive intervals
``priors``        the host recordings' measured prices and how they become a published CPU's prior
``profiles``      the published rows, their roles, and one profile per CPU (or per table)
``evaluation``    the protocol below, in code: reproduction, moved/unmoved rows, the headline figures
``applications``  Redis requests and grep lines (seed 001)
``text``          tables and text for the CLI (bench --mode model, reproduce, predict)

Evaluation protocol (fixed before the figures it produces were looked at)
--------------------------------------------------------------------------
1. *Fit rows* are a table's before rows (variants ``current``, ``xol-stp``, ``no-uprobe``). No after
   row enters any fit, any prior, or any choice of structure or spread.
2. *Priors* may come only from a measurement of a path that no held-out row of that table tests.
   Concretely: a host row is left out of the host fit that makes a CPU's prior when its events per hit
   equal those of a moved held-out row of any table of that CPU (:func:`.priors.host_rows_excluded`);
   no published figure outside the seed tables is used (the v5 cover letter's optimised nop5 and the
   STP thread's later Kunpeng run both measure held-out paths, so neither is).
3. A held-out row is *moved* when the emulator's events per hit on its after-kernel differ from those
   on its before-kernel: only then does it test a prediction. Held-out rows whose events do not change
   (*unmoved*) test the fit and run-to-run noise; they are reported apart.
4. *Duplicates* count once: a table whose rows all repeat an earlier source's table (seed 004 quotes
   003) is marked ``duplicate_of`` and left out of every summary.
5. The *headline* is the moved rows': median |error| of the posterior-mean prediction, and coverage,
   the share of moved rows whose published figure lies inside its 80% predictive interval, with the
   intervals' widest half-width. Targets (issue): median <= 5%, coverage >= 80%, half-width <= 15%.
6. The same headline is computed with each seed table fitted on its own current rows alone
   (:func:`.evaluation.per_table_alone`).
7. A change to the model after its held-out figures were seen is listed here with a reason that no
   held-out row supplies, and the earlier figures are kept beside the new ones: such a re-run is not
   blind, and is reported as such.

Versions
~~~~~~~~
* v1 (2026-11-30), blind under rules 1-6: moved rows median |error| 10.1%, 50% inside (one profile per
  CPU); 9.0%, 69% (each table alone).
* v2 (2026-12-01), two changes made after v1's figures were seen, each resting on a fact read or measured
  apart from every held-out row; spreads, roles and the prior's form unchanged:

  a. the host's consumer scan attaches a BPF program to each perf event, as bench_trigger.c does
     (``bpf_program__attach_uprobe``), instead of bare perf events, which write a perf sample on every
     hit: about 160 ns per consumer on the recording host against about 85 ns for the BPF consumer;
  b. a kernel copy to or from user memory is priced per call (``uaccess``), not per byte:
     ``benchmarks/uaccess_size.py`` finds 0.004 ns per byte from 8 to 4096 bytes on the recording host,
     against about 130 ns for a read of /dev/zero that copies at all.
  v2's figures: 3.7%, 100% inside, but the two arm64 simulated-stp rows (+41%, +23%) only because their
  intervals were unbounded (``pin_map`` unmeasured); x86 rows alone 3.0%, all inside, widest +-14.1%.
  Each table alone: 5.0%, 100% inside, widest unbounded (seed 000's tables +-20-32%).
* v3 (2026-12-01), one change made after v2's figures were seen, for the unbounded arm64 intervals: the
  host measures ``pin_map`` as a shared minus a private FUTEX_WAKE (get_user_pages_fast + put_page, a
  path no held-out row takes), and the arm64 prior carries it like every other price. The pair's common
  kernel work has its own price (``futex_wake``), which no published bench pays: a first fit without it,
  seen once, read that work as a dearer syscall (the host fit alone showed it: residuals inflated
  every host price's sd six- to sevenfold). The host recording was made again with the pair (other
  rows within 1%).
  v3's figures: 3.5%, 88% inside, half-width median 9.2%, widest +-13.9% (x86 rows alone 3.0%, all
  inside, widest +-13.9%); the two simulated-stp rows are +34% and +20%, outside intervals of +-5% and
  +-4%: the carried page-pin price is too small for the STP patch's path on Kunpeng, and its spread too
  narrow. Each table alone: 5.0%, 88% inside, widest +-31.8% (seed 000). Not blind: a third look.
* v4 (2026-12-01), one change made after v3's figures were seen, for seed 000's tables alone: their fit
  rows are all uretprobes on 6.10 and rule 2 leaves the host's uretprobe-nop out (it takes the 6.11
  return path they test), so ``return_instance`` had no prior and the rows could not say how much of a
  hit is its two exceptions. A 32-bit task still returns through an int3 on a 6.11+ kernel
  (``arch_uretprobe_trampoline``: the syscall trampoline is for 64-bit tasks; a host test shows it), so
  the host now measures ``uretprobe-nop-compat`` and ``uprobe-nop-compat``: the 6.10 return path, which
  no held-out row takes. The recording was made again for it, on this session's machine (an Intel Xeon
  VM; the AMD one of v1-v3 was gone, and one recording must come from one machine; v5 brings the AMD
  recording back beside it), with the rounds
  levelled (uprobe_lab.native.price_benches). Spreads, roles and the prior's form unchanged.
  v4's figures: 5.5%, 50% inside, half-width median 6.9%, widest +-13.4% (x86 rows alone 4.6%, 57%
  inside); each table alone: 6.4%, 50% inside, widest +-13.4%; unmoved rows 1.4%, 75% inside. Every
  interval is now narrower than +-15%, and half the moved rows miss theirs: the AMD uretprobe rows by
  +5-7% (+9-14% alone), the nop5 series' optimised uprobe-nop5 and uretprobe-nop5 by +36% and +17%, the
  Kunpeng simulated-stp rows by +26% and +15%. On this host an exception costs 4.3 syscalls (710 and
  166 ns), on the AMD one 2.7 (479 and 177 ns); one scale per CPU carries that ratio to the published
  CPUs, and the fit rows, all int3 paths, cannot correct it. Not blind: a fourth look, kept as it came.
* v5 (2026-12-01), one change made after v4's figures were seen, written here before v5's were computed:
  the prior carries every bundled host recording, not only the newest. One machine's recording cannot
  say how far the ratios between prices move from one machine to another; that spread was an assumed
  40% per price, independent across prices. The two recordings, made by the same benches on two
  machines (v3's AMD EPYC VM, v4's Intel Xeon VM; the AMD one lacks the 32-bit task's rows and its
  rounds were not levelled), disagree on exactly the ratios the seed tables cannot
  identify: an exception costs 2.7 or 4.3 syscalls, 5.6 or 9.7 handler runs. That disagreement is a
  measured spread between machines. Each recording is carried as before (its own host fit, rule-2
  exclusions and scale); the prior is their equal mixture matched to one Gaussian: mean the recordings'
  mean, covariance their mean covariance plus the spread of their means (:func:`.priors.mixed_prior`).
  A price one recording leaves uncarried takes, in that recording's part, the others' values. No
  held-out row supplies the reason or the data (both recordings are host rows).
  First form, the spread of the means as their full covariance (the direction the two machines differ
  in): 2.4%, 75% inside, half-width median 8.0%, widest +-17.1%; each table alone 6.2%, 75%, widest
  +-17.1%. It was not kept, for a reason no held-out row gives: with two machines that covariance has
  rank one, so every price is perfectly correlated with every other through it, and the sign test (a
  bench 20% slower never speeds up a prediction whose path holds its path) failed: usermode-count
  slower made the optimised uprobe-nop5 2% faster, the dearer user instruction read as "more like the
  machine with the dearer trap". Kept form: the spread of the means per price, on the diagonal, the
  form the transfer spread already had.
  v5's figures: 3.0%, 75% inside, half-width median 7.9%, widest +-15.1% (x86 rows alone 2.9%, 86%
  inside); each table alone: 6.1%, 75% inside, widest +-15.1% (x86 rows 4.5%, 86%); unmoved rows 1.4%,
  80% inside. Every uretprobe row of seeds 000/002 is now inside its interval, fitted per CPU or alone.
  The misses: the nop5 series' optimised uprobe-nop5 and uretprobe-nop5 (+19% and +9%, outside +-15%
  and +-8%) and the Kunpeng simulated-stp rows (+30% and +18%). Not blind: a fifth and a sixth look.
"""
from __future__ import annotations

from ..process import LabError
from .applications import APP_MODEL, app_predictions
from .evaluation import (REPRO_COLUMNS, ROLE_FIT, ROLE_MOVED, ROLE_UNMOVED, coverage_tail, error_summary, headline,
                         headline_text, moved_rows, per_table_alone, reproduction)
from .fit import PLAUSIBLE_NS, ROW_SIGMA_FLOOR, Z80, Prior, Profile, fit_profile, mops_interval
from .prices import (ARM64_KERNEL, BENCH_ALIASES, FIXED_PRICES, PRICE_NAMES, PRICES, breakdown, clear_cache,
                     events_for, fixed_ns, hit_ns, kernel_setup, modelled_kernel, price_counts)
from .priors import TRANSFER_LOG_SD, carried_prior, host_frame, host_profile, load_host_recording, mixed_prior
from .profiles import (BEFORE_VARIANTS, PROFILES, bench_rows, fit_report, get_profile, profile_fit_rows,
                       profile_names, recorded_hosts)
from .text import format_comparison, model_table, predict_from_measured

__all__ = [n for n in dir() if not n.startswith("_")]
