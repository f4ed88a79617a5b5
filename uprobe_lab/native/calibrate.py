"""A "this machine" profile: the cost model fitted on native figures, and what it predicts for other kernels.

Native rows say which kernel they ran on as ``uname -r`` (``6.18.44-fc-v857``); the model knows the
versions where a probe hit's cost changed (6.10, 6.11, 6.16, 6.18). :func:`model_kernel` maps a release
to the newest modelled version not newer than it: a 6.14 kernel behaves as 6.11, a 6.19 as 6.18.

Everything here goes through the model's public functions (``fit_prices``, ``Profile.predict``,
``bench_rows``): the same fit and prediction as ``python -m uprobe_lab predict --measured FILE.csv --to KERNEL``.
"""
from __future__ import annotations

import re

import pandas as pd

from .. import model
from ..kernel import KERNELS
from ..process import LabError

PREDICT_KERNELS = ("6.10", "6.11", "6.16", "6.18")
PROFILE_NAME = "this-machine"


def _version(text: str) -> tuple[int, int] | None:
    m = re.match(r"(\d+)\.(\d+)", str(text))
    return (int(m.group(1)), int(m.group(2))) if m else None


def model_kernel(release: str) -> str | None:
    """The modelled kernel whose probe-hit rules ``release`` has, or None if it predates them all."""
    have = _version(release)
    if have is None:
        return None
    known = sorted(KERNELS, key=_version)
    older = [k for k in known if _version(k) <= have]
    return older[-1] if older else None


def measured_frame(rows: list[dict]) -> pd.DataFrame:
    """Native result dicts -> the table ``predict_from_measured`` takes (arch, kernel, bench, mops)."""
    out = []
    for r in rows:
        kernel = model_kernel(r["kernel"])
        if kernel is None:
            raise LabError(f"kernel {r['kernel']} predates every modelled version ({', '.join(KERNELS)})")
        out.append({"arch": r["arch"], "kernel": kernel, "release": r["kernel"], "bench": r["bench"],
                    "mops": float(r["mops"]), "stddev": float(r.get("stddev", 0.0))})
    return pd.DataFrame(out, columns=["arch", "kernel", "release", "bench", "mops", "stddev"])


def calibrate(rows: list[dict], cpu: str = "this machine") -> model.Profile:
    """Fit the model's prices on native rows: a Profile whose ``predict(bench, kernel)`` works like the
    published CPUs' profiles."""
    measured = measured_frame(rows)
    arches = sorted(set(measured["arch"]))
    if len(arches) != 1:
        raise LabError(f"native rows must be from one architecture, got {arches}")
    arch = arches[0]
    prices, rho = model.fit_prices(measured[["bench", "kernel", "mops"]], arch)
    return model.Profile(PROFILE_NAME, cpu, arch, prices, measured, rho)


def prices_table(profile: model.Profile) -> pd.DataFrame:
    """The calibrated prices next to the model's priors (scaled to this machine)."""
    return pd.DataFrame({
        "price": model.PRICE_NAMES,
        "ns": [round(profile.prices[k], 2) for k in model.PRICE_NAMES],
        "prior_ns": [round(model.PRIOR_NS[k] * profile.rho, 2) for k in model.PRICE_NAMES],
        "covers": [", ".join(model.PRICES[k][0]) for k in model.PRICE_NAMES],
    })


def predict_kernels(rows: list[dict], kernels=PREDICT_KERNELS) -> pd.DataFrame:
    """One row per bench: measured M/s here, then the calibrated prediction for each kernel in ``kernels``."""
    profile = calibrate(rows)  # the prices do not depend on the kernel predicted: fit them once
    measured = profile.fit_rows
    out = measured[["bench", "mops", "stddev"]].rename(columns={"mops": "measured_mops"}).set_index("bench")
    out.insert(0, "measured_on", measured.set_index("bench")["kernel"])
    for k in kernels:
        out[k] = [round(profile.predict(b, k), 3) for b in out.index]  # as predict_from_measured rounds
    return out.reset_index()


def published_for(kernel: str, arch: str = "x86_64") -> pd.DataFrame:
    """Published M/s on ``kernel`` (one row per bench, the first table that has it): bench, mops, cpu."""
    rows = model.bench_rows()
    rows = rows[(rows["arch"] == arch) & (rows["kernel"].astype(str) == str(kernel))]
    rows = rows.drop_duplicates("bench")
    return rows[["bench", "value", "cpu", "source"]].rename(columns={"value": "mops"}).reset_index(drop=True)


def native_vs_model(rows: list[dict]) -> pd.DataFrame:
    """Per bench: native M/s ± stddev, the calibrated model on the same kernel, and the published figure
    for that kernel (another machine: shown for scale, not fitted)."""
    profile = calibrate(rows)
    measured = profile.fit_rows
    kernel = measured["kernel"].iloc[0]
    pub = published_for(kernel, profile.arch).set_index("bench")
    out = []
    for r in measured.itertuples(index=False):
        model_mops = profile.predict(r.bench, r.kernel)
        out.append({"bench": r.bench, "kernel": r.kernel, "native_mops": r.mops, "native_stddev": r.stddev,
                    "model_mops": round(model_mops, 3), "model_error_pct": round(100 * (model_mops / r.mops - 1), 1),
                    "published_mops": pub["mops"].get(r.bench, float("nan")),
                    "published_cpu": pub["cpu"].get(r.bench, "")})
    return pd.DataFrame(out)


def kernel_change(pred: pd.DataFrame, kernel: str) -> pd.DataFrame:
    """What moving this machine to ``kernel`` would do, bench by bench: measured here, predicted there, change."""
    if kernel not in pred.columns:
        raise LabError(f"no prediction for kernel {kernel!r}; predicted: {', '.join(c for c in pred.columns if c[0].isdigit())}")
    out = pred[["bench", "measured_on", "measured_mops"]].copy()
    out[f"predicted_on_{kernel}"] = pred[kernel]
    out["change_pct"] = (100 * (pred[kernel] / pred["measured_mops"] - 1)).round(1)
    return out
