"""A cost model: prices per event kind, counts from the emulator, checked against the published tables.

An emulator cannot time a kernel, but it counts exactly what each hit costs. A *profile* is one CPU's
price list (ns per priced event, :mod:`.prices`) as a posterior with a covariance (:mod:`.fit`), so every
predicted figure carries an interval. Priors come from native measurements on the lab's hosts (three
recordings, three machines), carried to the published CPUs as ratios with their spread (:mod:`.priors`). The modules:

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
   intervals' widest half-width. Targets: median <= 5%, coverage >= 80%, half-width <= 15%.
6. The same headline is computed with each seed table fitted on its own current rows alone
   (:func:`.evaluation.per_table_alone`).
7. A change to the model after its held-out figures were seen is listed in ``docs/model.md`` with a
   reason that no held-out row supplies, and the earlier figures are kept beside the new ones: such a
   re-run is not blind, and is reported as such.
8. *Tables outside the seeds* (``data/outside_seeds.csv``; the posted texts, and why each table was taken
   or not, in ``tests/data/outside_seeds/README.md``): every bench_trigger table of the seeds' patch series
   and their sibling patches found on the lists that compares a before and an after kernel the lab models.
   A table posted again unchanged counts once (whatever it calls its CPU and columns); a row its own
   thread shows to be a bench bug, or that a later message posts again, is noted ``left out``. They
   enter no fit but their own table's (rule 6's form, :func:`.evaluation.outside_seeds_alone`), no
   prior, and no choice of structure or spread. Their figures were computed only after the tables and
   this rule were committed, on the version then current, and are reported as they came, each table too.

Versions
~~~~~~~~
Nine so far (v1 blind under rules 1-6, v2-v9 not blind), each with its reason and figures, in
``docs/model.md``. The current one, v9: moved rows 4.2% median |error|, 75% inside their 80% intervals,
half-width median 7.7%, widest +-13.4% (one profile per CPU); 5.7%, 75%, widest +-15.6% with each table
alone; unmoved rows 1.6%, 85% inside. (v8's, before a 32-bit task's trap was priced apart: 4.4%, 81%,
10.9%, +-19.5%; 6.3%, 81%, +-25.5%; 1.6%, 85%. v7's, before the AMD EPYC recording was made again by
today's benches: 3.2%, 75%, 7.8%, +-15.2%; 6.3%, 75%, +-15.2%; 1.4%, 80%.)

On the tables outside the seeds (rule 8), v9: 21 moved rows, 5.9% median |error|, 52% inside,
half-width median 3.8%, widest +-28.4%; the 5 x86 ones 3.4%, 100% inside, widest +-28.4%; the 16
arm64 ones 8.4%, 38% inside, widest +-6.5%. (v8: 9.3%, 52%, 4.0%, +-44.3%; x86 9.3%, 100%, +-44.3%;
arm64 8.4%, 38%, +-7.1%. v7: 5.7%, 52%, 3.8%, +-32.7%; x86 2.0%, 100%, +-32.7%; arm64 8.3%, 38%, +-7.1%.
v5, as it stood when they were first computed: 5.4%, 52%, 3.8%, +-33.4%; x86 2.5%, 100%, +-33.4%;
arm64 8.0%, 38%, +-6.6%.)
"""
from __future__ import annotations

from ..process import LabError
from .applications import APP_MODEL, app_predictions
from .evaluation import (REPRO_COLUMNS, ROLE_FIT, ROLE_MOVED, ROLE_UNMOVED, coverage_tail, error_summary, headline,
                         headline_text, moved_rows, outside_seeds_alone, per_table_alone, reproduction)
from .fit import PLAUSIBLE_NS, ROW_SIGMA_FLOOR, Z80, Prior, Profile, fit_profile, mops_interval
from .prices import (ARM64_KERNEL, BENCH_ALIASES, FIXED_PRICES, PRICE_NAMES, PRICES, breakdown, clear_cache,
                     events_for, fixed_ns, hit_ns, kernel_setup, modelled_kernel, price_counts)
from .priors import TRANSFER_LOG_SD, carried_prior, host_frame, host_profile, load_host_recording, mixed_prior
from .profiles import (BEFORE_VARIANTS, PROFILES, bench_rows, fit_report, get_profile, outside_rows,
                       profile_fit_rows, profile_names, recorded_hosts)
from .text import format_comparison, model_table, predict_from_measured

__all__ = [n for n in dir() if not n.startswith("_")]
