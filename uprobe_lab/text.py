"""Printed text that fits the page: what the lab prints for a notebook wraps at PAGE_COLUMNS, as JupyterLab and
the course site would not (a line wider than the output area is cut or scrolls)."""
from __future__ import annotations

import re
import textwrap

PAGE_COLUMNS = 100
_LEAD = re.compile(r"\s*(?:[-*]\s+|WARNING:\s+|\w[\w .-]{0,24}:\s+)?")  # a line's indent and its label or marker


def wrap(text: str, width: int = PAGE_COLUMNS) -> str:
    """Each line of ``text`` wrapped at ``width``; a continuation hangs under the line's text, past its indent
    and its list marker or short "label: " (so a list item or a labelled line still reads as one)."""
    out = []
    for line in str(text).splitlines() or [""]:
        if len(line) <= width:
            out.append(line)
            continue
        hang = len(_LEAD.match(line).group(0))
        hang = hang if hang <= width // 3 else len(line) - len(line.lstrip())
        out.append(textwrap.fill(line, width, subsequent_indent=" " * hang, break_on_hyphens=False,
                                 break_long_words=False))
    return "\n".join(out)


def say(*parts) -> None:
    """``print(*parts)``, wrapped to the page."""
    print(wrap(" ".join(str(p) for p in parts)))
