"""Tables as a page or a slide shows them: cells pandas' HTML would let a narrow column break."""
from __future__ import annotations

import pandas as pd

from ..errors import LabError


def unbroken(frame: pd.DataFrame, columns) -> "pd.io.formats.style.Styler":
    """``frame`` with the cells of ``columns`` kept on one line: an errno such as -ENXIO would otherwise break
    after its minus sign in a narrow column (a browser may break a line after a hyphen-minus)."""
    missing = [c for c in columns if c not in frame.columns]
    if missing:
        raise LabError(f"no column {missing[0]!r} in the table; give one of {', '.join(map(str, frame.columns))}")
    return (frame.style.set_properties(subset=list(columns), **{"white-space": "nowrap"})
            .set_table_attributes('class="dataframe"'))  # styled as every other table of the page

