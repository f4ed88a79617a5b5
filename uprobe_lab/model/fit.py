"""Fitting prices with stated uncertainty: a Gaussian posterior over the price list.

The model is linear in the prices, so the fit is Bayesian linear regression, in closed form:

* each measured row says ``counts . prices + fixed = t`` (t = 1000 / M/s, ns per hit) up to a
  *relative* error with standard deviation ``sigma_i = sqrt(sigma_model^2 + rel_err_i^2)``: the row's own
  measurement error (``rel_err``, 0 where unknown) plus the model's error, ``sigma_model``, estimated from
  the fit residuals (``sqrt(sum r^2 / (n - p_eff))``, p_eff the posterior's effective number of fitted
  directions) but never below :data:`ROW_SIGMA_FLOOR` (2%: a before-row and a rerun of the same
  kernel in another mail differ by about that, and the linear model has no term for cache or pipeline
  effects);
* a :class:`Prior` is a Gaussian over the prices (mean, covariance), see :mod:`.priors`;
* the posterior mean and covariance are ``Lambda^-1 (X'WX ...)`` as usual:
  ``cov = (X' W X + S0^-1)^-1``, ``mean = cov (X' W y + S0^-1 m0)``.

A prediction's interval is the posterior predictive one: the variance of ``counts . prices`` under
the posterior covariance plus the row error ``(sigma_model t)^2`` and, for a machine calibrated on native
rows, its level's spread between runs, twice (``LEVEL_DRAWS * (level_sd t)^2``), a two-sided 80% interval at
+- 1.2816 sd in time, turned into M/s (so it is not symmetric in M/s).
"""
from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from ..errors import check_choice
from ..process import LabError
from .prices import PRICE_NAMES, PRICES, events_for, events_rows, fixed_ns, price_counts

ROW_SIGMA_FLOOR = 0.02
Z80 = 1.2815515655446004  # the standard normal's 90% quantile: a central 80% interval
UNINFORMATIVE_SD_NS = 1e4  # a prior this wide leaves a price to the data (or unpinned, and says so)
# A calibrated machine's figure is its prices times its level in the run that measured them; the figure
# another run shows is times that run's level: their ratio's variance is twice one level's.
LEVEL_DRAWS = 2
PRIOR_ONLY_SD = 0.9  # rows that leave a price's sd at this share of its prior's added under a quarter of its precision

# Sanity bounds (ns), not priors: what one event can plausibly cost on a 1-5 GHz CPU running natively.
# A fitted price outside them is reported (Profile.warnings), never clipped.
PLAUSIBLE_NS = {"user_insn": (0.05, 5.0), "exception": (30.0, 3000.0), "compat_exception": (30.0, 3000.0),
                "syscall": (20.0, 2000.0),
                "handler": (1.0, 1000.0), "xol_step": (10.0, 3000.0), "return_instance": (1.0, 1000.0),
                "uaccess": (1.0, 500.0), "pin_map": (10.0, 5000.0), "futex_wake": (5.0, 2000.0)}


@dataclass
class Prior:
    """A Gaussian over the prices (PRICE_NAMES order) and, per price, where it came from and whether a
    measurement stands behind it (``carried``; all True unless given)."""

    mean: np.ndarray
    cov: np.ndarray
    source: dict
    carried: np.ndarray | None = None

    def __post_init__(self):
        if self.carried is None:
            self.carried = np.ones(len(PRICE_NAMES), bool)

    @classmethod
    def uninformative(cls, why: str = "no measurement") -> "Prior":
        n = len(PRICE_NAMES)
        return cls(np.zeros(n), np.eye(n) * UNINFORMATIVE_SD_NS ** 2, {p: why for p in PRICE_NAMES},
                   np.zeros(n, bool))

    def leave_uninformative(self, i: int, why: str) -> None:
        """Price ``i`` gets no measurement: mean 0, sd UNINFORMATIVE_SD_NS, uncorrelated."""
        self.mean[i] = 0.0
        self.cov[i, :] = self.cov[:, i] = 0.0
        self.cov[i, i] = UNINFORMATIVE_SD_NS ** 2
        self.source[PRICE_NAMES[i]] = why
        self.carried[i] = False

    def sd(self) -> np.ndarray:
        return np.sqrt(np.diag(self.cov))


@dataclass
class Profile:
    """One CPU's prices as a posterior (mean and covariance, ns), with the rows and prior behind it."""

    name: str
    cpu: str
    arch: str
    mean: np.ndarray
    cov: np.ndarray
    sigma_model: float
    fit_rows: pd.DataFrame = field(repr=False)
    prior: Prior = field(repr=False)
    warnings: list = field(default_factory=list)
    scales: dict = field(default_factory=dict)  # per host recording: how much slower this CPU is (prior's factor)
    host_excluded: list = field(default_factory=list)  # host rows left out of the prior (protocol rule 2)
    recordings_left_out: list = field(default_factory=list)  # recordings of the fitted machine itself, not in its prior
    virtualised: bool = False  # for a host profile: measured under a hypervisor
    dropped: list = field(default_factory=list)  # rows a calibration left out as too noisy
    level_sd: float = 0.0  # relative sd of the whole machine's speed over a native run (price_benches)
    state_note: str = ""  # a native run's speed states and which one its figures are (price_benches)
    fit_note: str = ""  # a calibration's model error and the rows furthest from its fit (calibrate)
    measured: pd.DataFrame | None = field(default=None, repr=False)  # a calibration's rows, noisy ones too

    @property
    def prices(self) -> dict:
        return {p: float(v) for p, v in zip(PRICE_NAMES, self.mean)}

    @property
    def price_sd(self) -> dict:
        return {p: float(v) for p, v in zip(PRICE_NAMES, np.sqrt(np.diag(self.cov)))}

    def hit_interval(self, events: dict) -> tuple[float, float]:
        """(mean ns per hit, predictive sd in ns) for a bench with these events: the prices' posterior
        variance, the model's own error and, for a calibrated machine, its speed's spread, twice: the
        machine's level in the run the prices came from and in the run whose figure the prediction is for
        are two draws (:data:`LEVEL_DRAWS`)."""
        c = price_counts(events)
        t = float(c @ self.mean) + fixed_ns(events)
        var = float(c @ self.cov @ c) + (self.sigma_model * t) ** 2 + LEVEL_DRAWS * (self.level_sd * t) ** 2
        return t, math.sqrt(max(var, 0.0))

    def interval(self, bench: str, kernel: str, consumers: int = 1, **options) -> tuple[float, float, float]:
        """(predicted M/s, low, high) of ``bench`` on ``kernel``: the 80% posterior predictive interval."""
        return mops_interval(*self.hit_interval(events_for(bench, self.arch, kernel, consumers, **options)))

    def predict(self, bench: str, kernel: str, **options) -> float:
        """Predicted M/s of ``bench`` on ``kernel`` (posterior mean prices, events from the emulator)."""
        return self.interval(bench, kernel, **options)[0]

    def change(self, bench: str, from_kernel: str, to_kernel: str) -> tuple[float, float]:
        """(speedup, sd of its log): M/s of ``bench`` on ``to_kernel`` over M/s on ``from_kernel``, i.e. the
        ratio of the two times per hit. Its error is the prices' posterior (through the gradient of the log
        ratio) plus the model's own error on each time, when the events differ (the same events: exactly 1).
        The machine's speed over a run (``level_sd``) cancels: both times come from the same run."""
        e_from, e_to = (events_for(bench, self.arch, k) for k in (from_kernel, to_kernel))
        c_from, c_to = price_counts(e_from), price_counts(e_to)
        t_from, t_to = float(c_from @ self.mean) + fixed_ns(e_from), float(c_to @ self.mean) + fixed_ns(e_to)
        g = c_to / t_to - c_from / t_from  # d log(t_to / t_from) / d prices
        var = float(g @ self.cov @ g) + (2 * self.sigma_model ** 2 if e_from != e_to else 0.0)
        return t_from / t_to, math.sqrt(max(var, 0.0))

    def with_prices(self, **changes) -> "Profile":
        """The same profile with some prices set by hand (their uncertainty kept)."""
        mean = self.mean.copy()
        for k, v in changes.items():
            check_choice(k, PRICE_NAMES, "a price's name")
            mean[PRICE_NAMES.index(k)] = float(v)
        return dataclasses.replace(self, mean=mean)

    def report(self) -> pd.DataFrame:
        """Each price: posterior mean and sd next to its prior's, and where the prior came from."""
        return pd.DataFrame({
            "price": PRICE_NAMES, "ns": self.mean, "sd": np.sqrt(np.diag(self.cov)),
            "prior_ns": self.prior.mean, "prior_sd": self.prior.sd(),
            "prior_from": [self.prior.source[p] for p in PRICE_NAMES],
            "covers": [", ".join(PRICES[p][0]) for p in PRICE_NAMES]})


def mops_interval(t_ns: float, sd_ns: float, z: float = Z80) -> tuple[float, float, float]:
    """(M/s, low, high) from a time per hit and its sd: the time interval t +- z sd, inverted. A time that is
    not positive (prices the rows left unpinned) gives NaN, not a negative rate."""
    if not t_ns > 0:
        return math.nan, math.nan, math.nan
    lo_t, hi_t = t_ns - z * sd_ns, t_ns + z * sd_ns
    return 1000.0 / t_ns, 1000.0 / hi_t, (1000.0 / lo_t if lo_t > 0 else math.inf)


def design(rows: pd.DataFrame, arch: str) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Rows (bench, kernel, mops[, consumers, rel_err]) -> (X, y, rel_err) on relative time error."""
    codes, events = events_rows(rows, arch)
    counts = np.array([price_counts(ev) for ev in events]).reshape(-1, len(PRICE_NAMES))[codes]
    fixed = np.array([fixed_ns(ev) for ev in events], float)[codes]
    t = 1000.0 / rows["mops"].astype(float).to_numpy()
    err = (pd.to_numeric(rows["rel_err"]).fillna(0.0).to_numpy(float) if "rel_err" in rows
           else np.zeros(len(rows)))
    return counts / t[:, None], (t - fixed) / t, err


def posterior(x: np.ndarray, y: np.ndarray, row_sd: np.ndarray, prior: Prior) -> tuple[np.ndarray, np.ndarray]:
    """Posterior (mean, cov) of the prices for rows x.theta = y with independent errors row_sd."""
    w = 1.0 / row_sd ** 2
    p0 = np.linalg.inv(prior.cov)
    cov = np.linalg.inv(x.T @ (x * w[:, None]) + p0)
    mean = cov @ (x.T @ (w * y) + p0 @ prior.mean)
    return mean, (cov + cov.T) / 2


def fit_profile(rows: pd.DataFrame, arch: str, prior: Prior, name: str = "fitted", cpu: str = "") -> Profile:
    """Fit a Profile on ``rows`` (columns bench, kernel, mops; optional consumers, rel_err) under ``prior``."""
    if rows.empty:
        raise LabError("no rows to fit prices on")
    x, y, err = design(rows, arch)
    sd = np.sqrt(ROW_SIGMA_FLOOR ** 2 + err ** 2)
    mean, cov = posterior(x, y, sd, prior)
    resid = y - x @ mean
    # trace(X W cov X') summed row by row: the n x n matrix itself would grow with the square of the rows
    p_eff = float(np.sum(((x / sd[:, None] ** 2) @ cov) * x))
    sigma = max(ROW_SIGMA_FLOOR, math.sqrt(float(resid @ resid) / max(len(y) - p_eff, 1.0)))
    if sigma > ROW_SIGMA_FLOOR:
        sd = np.sqrt(sigma ** 2 + err ** 2)
        mean, cov = posterior(x, y, sd, prior)
    prof = Profile(name, cpu, arch, mean, cov, sigma, rows.reset_index(drop=True), prior)
    prof.warnings = implausible(prof, counted=(x != 0).any(axis=0))
    return prof


def misfits(prof: Profile) -> list[tuple[str, float]]:
    """The fit rows as (``bench xN``, residual), furthest from the fitted prices first. A residual is the
    row's time minus the model's, over the row's time: positive where the row ran slower than the model
    has it. Where a few rows lead this list by far, they are what ``sigma_model`` (every interval's row
    error) is made of: rows the model's events do not describe on this CPU, not noise."""
    x, y, _ = design(prof.fit_rows, prof.arch)
    resid = y - x @ prof.mean
    labels = [f"{r.bench} x{int(getattr(r, 'consumers', 1) or 1)}" for r in prof.fit_rows.itertuples(index=False)]
    return sorted(zip(labels, map(float, resid)), key=lambda lr: -abs(lr[1]))


def implausible(prof: Profile, counted) -> list[str]:
    """A line per fitted price outside PLAUSIBLE_NS: only prices some fit row counts (``counted``, in
    PRICE_NAMES order; the others are their prior, carried from the host as a ratio) and the data pinned
    (sd < 50% of the bound's top, so a price left at an uninformative prior is not reported as fitted)."""
    out = []
    for p, v, s, c in zip(PRICE_NAMES, prof.mean, np.sqrt(np.diag(prof.cov)), counted):
        lo, hi = PLAUSIBLE_NS[p]
        if c and s < 0.5 * hi and not lo <= v <= hi:
            out.append(f"{p} fitted at {v:.1f} +- {s:.1f} ns, outside the plausible {lo:g}..{hi:g} ns for one "
                       f"event on a CPU running natively (a hypervisor, a frequency change or noisy rows?)")
    return out


def unpinned(prof: Profile) -> list[str]:
    """Prices neither the rows nor the prior pin (posterior sd still near UNINFORMATIVE_SD_NS)."""
    return [p for p, s in prof.price_sd.items() if s > 0.5 * UNINFORMATIVE_SD_NS]


def prior_only(prof: Profile) -> list[str]:
    """Prices an informative prior sets and the rows barely touch: posterior sd at least
    :data:`PRIOR_ONLY_SD` of the prior's (the rows added less than a quarter of the prior's precision).
    What such a price says, the prior said; :func:`unpinned` lists those whose prior says nothing either."""
    prior_sd = dict(zip(PRICE_NAMES, prof.prior.sd()))
    free = unpinned(prof)
    return [p for p, s in prof.price_sd.items() if s >= PRIOR_ONLY_SD * prior_sd[p] and p not in free]
