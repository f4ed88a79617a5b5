"""``python -m uprobe_lab reproduce``: the files it writes (cli.cmd_reproduce checks and stages the directory)."""
from __future__ import annotations

from pathlib import Path

import pandas as pd

from . import model
from .model import contention
from .views import charts, many_cpus

REPRODUCE_TABLES = ("reproduction.csv", "applications.csv", "reproduction_tables_alone.csv",
                    "reproduction_outside_seeds.csv", "scaling_model.csv")


def write_reproduction(out: Path, repro: pd.DataFrame):
    """Every seed chart, the reproduction tables and the per-hit cost breakdown into ``out``; prints the figures."""
    repro.drop(columns=["table", "kernel"]).to_csv(out / "reproduction.csv", index=False)
    for (source, table), _ in repro.groupby(["source", "table"], sort=False):
        fig = charts.seed_table_chart(repro, source, table)
        fig.savefig(out / f"{source[:3]}_{table}.png", dpi=110)
    parts = []
    for name in model.profile_names():
        cpu, arch = model.PROFILES[name]
        prof = model.get_profile(name)
        for r in repro[repro["cpu"] == cpu].drop_duplicates(["bench", "kernel"]).itertuples(index=False):
            if r.bench in ("usermode-count",):
                continue
            parts.append((f"{name.split('-')[0]} {r.kernel} {r.bench}",
                          model.breakdown(prof.prices, model.events_for(r.bench, arch, str(r.kernel)))))
    charts.breakdown_chart(parts).savefig(out / "cost_breakdown.png", dpi=110)
    charts.error_chart(repro).savefig(out / "model_error.png", dpi=110)
    apps = model.app_predictions()
    apps.to_csv(out / "applications.csv", index=False)
    alone = model.per_table_alone()
    alone.drop(columns=["table", "kernel"]).to_csv(out / "reproduction_tables_alone.csv", index=False)
    outside = model.outside_seeds_alone()
    outside.drop(columns=["kernel"]).to_csv(out / "reproduction_outside_seeds.csv", index=False)

    print(model.format_comparison(repro))
    print()
    print(model.APP_MODEL)
    print(apps.to_string(index=False))
    print()
    for name in model.profile_names():
        for w in model.get_profile(name).warnings:
            print(f"warning: profile {name}: {w}")
    print("per seed table (duplicates left out; moved = held-out rows whose events change):")
    print(model.error_summary(repro).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print()
    print(model.headline_text(model.headline(repro), "headline, one profile per CPU"))
    print(model.headline_text(model.headline(alone), "headline, each seed table fitted on its own current rows"))
    print("tables posted outside the seeds, each fitted on its own current rows (protocol rule 8):")
    print(model.error_summary(outside).to_string(index=False, float_format=lambda v: f"{v:.1f}"))
    print(model.headline_text(model.headline(outside), "headline, tables outside the seeds"))
    scaling = contention.evaluate()
    for table in contention.scaling_table()["table"].unique():
        many_cpus.scaling_chart(scaling, table).savefig(out / f"scaling_{table}.png", dpi=110)
    pd.concat([scaling["fitted"].assign(role="fitted"), scaling["held_out"].assign(role="held out")]).drop(
        columns=["T1_ns", "S", "M", "C"]).to_csv(out / "scaling_model.csv", index=False)
    print(f"many CPUs: contention model median |error| {scaling['median_abs_error']:.1%} on "
          f"{scaling['held_out_rows']} held-out rows, {scaling['inside_80']:.1%} inside their 80% intervals "
          "(docs/model.md, 'Many CPUs')")
