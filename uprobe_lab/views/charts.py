"""matplotlib charts shared by the chapters."""
from __future__ import annotations

EVENT_COLUMNS = ("exceptions", "syscalls", "emulated", "xol_steps", "consumers")


def events_per_hit_chart(rows: dict[str, dict[str, float]], kinds=EVENT_COLUMNS, title: str = "", ax=None):
    """Grouped bars: for each label (e.g. a bench) the count of each event kind per hit."""
    import matplotlib.pyplot as plt
    import numpy as np

    if ax is None:
        _, ax = plt.subplots(figsize=(8, 3.5))
    labels = list(rows)
    width = 0.8 / len(kinds)
    x = np.arange(len(labels))
    for i, kind in enumerate(kinds):
        ax.bar(x + i * width, [rows[label].get(kind, 0) for label in labels], width, label=kind)
    ax.set_xticks(x + width * (len(kinds) - 1) / 2, labels)
    ax.set_ylabel("per hit")
    ax.set_title(title)
    ax.legend(fontsize=8, ncols=len(kinds))
    return ax
