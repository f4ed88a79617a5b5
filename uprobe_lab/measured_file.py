"""The ``--measured`` file of ``predict``: a CSV of bench rates, or what ``bench --mode native --json`` prints,
read into one table, with every way such a file can be wrong named in one LabError."""
from __future__ import annotations

import codecs
import io
import json
import math
import os

import pandas as pd

from .constants import MAX_ITERATIONS
from .errors import LabError
from .model.text import MAX_MOPS, MIN_MOPS
from .native.calibrate import figure_rel_err
from .outputs import NotRegularFile, open_regular


def _finite(value) -> float | None:
    """``value`` as a finite float (a JSON number or numeric text), else None."""
    try:
        x = float(value)
    except (TypeError, ValueError, OverflowError):
        return None
    return x if math.isfinite(x) else None


def _brief(value, most: int = 40) -> str:
    """A value as a message shows it: its repr, cut short."""
    text = repr(value)
    return text if len(text) <= most else f"{text[:most - 15]}... ({len(text)} characters)"


def one_cpu_row(path: str, row: dict, shape: str) -> dict:
    """A row of ``bench --mode native -p N --json`` as the one-CPU row ``predict`` fits: its ``one_cpu`` run (the
    same bench on the first of the N CPUs alone). Its ``mops`` is the N producers' total, which is no one CPU's
    rate; a row on one CPU is returned as it is."""
    cpus = _finite(row.get("cpus", 1))
    if cpus is None or cpus <= 1:
        return row
    alone = row.get("one_cpu")
    if not isinstance(alone, dict) or _finite(alone.get("mops_per_cpu")) is None:
        raise LabError(f"--measured {path}: the {_brief(row.get('bench'))} row ran on {row.get('cpus')} CPUs (-p) "
                       f"and has no one_cpu run; predict fits one CPU's rates: give bench --mode native --json "
                       f"without -p, or with -p as this lab prints it; give {shape}")
    return {**row, "cpus": 1, "mops": alone["mops_per_cpu"], "stddev": alone.get("stddev", 0.0)}


def native_json_rows(path: str, text: str, shape: str):
    """``bench --mode native --json``'s output (or a recording's ``{"benches": [...]}``) as the
    ``--measured`` table (all text, as a CSV reads): arch, kernel (the release measured), bench, mops, and
    rel_err as the calibration reads a bench row's (:func:`.native.calibrate.figure_rel_err`)."""
    try:
        rows = json.loads(text)
    except RecursionError:  # the parser recurses once per bracket: bench --json nests three deep
        raise LabError(f"--measured {path}: its JSON nests too deep to be bench rows; give {shape}") from None
    except ValueError as err:  # not JSON, or an integer too long for Python to read (over 4300 digits)
        what = "holds a number too long to read" if "digits" in str(err) else f"is not well-formed JSON ({err})"
        raise LabError(f"--measured {path} {what}; give {shape}") from None
    if isinstance(rows, dict) and "benches" in rows:
        rows = rows["benches"]
    if not isinstance(rows, list) or not all(isinstance(r, dict) for r in rows):
        raise LabError(f"--measured {path}: expected a JSON list of bench rows, as bench --json prints; give {shape}")
    measured = [r for r in rows if not r.get("refused")]
    if not measured:
        held = f"only rows the kernel refused at attach ({len(rows)})" if rows else "no bench rows"
        raise LabError(f"--measured {path} holds {held}: nothing was measured; give {shape}")
    measured = [one_cpu_row(path, r, shape) for r in measured]
    modes = {str(r.get("mode")) for r in measured if r.get("mode") not in ("native", None, "")}
    if modes:
        raise LabError(f"--measured {path} holds {', '.join(sorted(modes))} rows; only native rows are "
                       f"measurements of your kernel; give {shape}")
    for i, r in enumerate(measured, 1):
        label = f"row {i} ({_brief(r.get('bench'))})" if r.get("bench") not in (None, "") else f"row {i}"
        missing = [k for k in ("arch", "kernel", "bench", "mops", "mode") if r.get(k) in (None, "")]
        if missing:
            raise LabError(f"--measured {path}: {label} has no {' and no '.join(missing)}; each row needs arch, "
                           f"kernel, bench, mops and mode, as bench --mode native --json prints them; give {shape}")
        for k in ("mops", "stddev", "repeats"):
            if k in r and _finite(r[k]) is None:
                raise LabError(f"--measured {path}: {label} has {k} {_brief(r[k])}, which is not a number a bench "
                               f"run gives; give {shape}")
        if not 1 <= _finite(r.get("repeats", 1) or 1) <= MAX_ITERATIONS:
            raise LabError(f"--measured {path}: {label} has repeats {_brief(r['repeats'])}: the number of timed "
                           f"intervals, 1 or more; give {shape}")
    table = pd.DataFrame([{k: str(r.get(k, "")) for k in ("arch", "kernel", "bench", "mops")} for r in measured],
                         columns=["arch", "kernel", "bench", "mops"])
    if all("stddev" in r for r in measured):
        try:
            table["rel_err"] = [str(figure_rel_err(r)) for r in measured]
        except (TypeError, ValueError):  # repeats "5.5", say
            raise LabError(f"--measured {path}: a row's mops, stddev or repeats is not a number; give {shape}") from None
    return table


def read_measured(path: str):
    """The ``--measured`` file as a table of arch, kernel, bench (text) and mops (a positive rate): a CSV,
    or the JSON that ``bench --mode native --json`` prints.

    Every way a file can be wrong ends in one LabError naming the file, the problem and what a
    good file looks like."""
    shape = ("a CSV with the columns arch, kernel, bench, mops (a header line, then one row per bench measured on "
             "your machine), or the output of bench --mode native --json")
    if os.path.isdir(path):
        raise LabError(f"--measured {path} is a directory; give {shape}")
    header = []  # a CSV's column names as written (JSON rows have no header)
    try:
        with open_regular(path) as f:  # read once: what is judged regular is what is parsed
            data = f.read()
        if b"\0" in data:
            raise UnicodeDecodeError("utf-8", data, data.index(b"\0"), len(data), "NUL byte")
        if data.removeprefix(codecs.BOM_UTF8).lstrip()[:1] in (b"[", b"{"):
            # a byte order mark (Windows editors write one) is no text
            table = native_json_rows(path, data.decode("utf-8-sig"), shape)
        else:
            table = pd.read_csv(io.BytesIO(data), dtype=str, keep_default_na=False)
            header = list(pd.read_csv(io.BytesIO(data), dtype=str, header=None, nrows=1,
                                      keep_default_na=False).iloc[0])
    except NotRegularFile as err:
        raise LabError(f"--measured {path} is not a regular file ({err.kind}); save the measurements to a file first "
                       f"and give {shape}") from None
    except FileNotFoundError:
        raise LabError(f"--measured {path}: no such file; give the path of {shape}") from None
    except OSError as err:
        raise LabError(f"--measured {path}: cannot read it ({err.strerror}); give {shape}") from None
    except UnicodeDecodeError:
        raise LabError(f"--measured {path} is not text (a binary file?); give {shape}") from None
    except pd.errors.EmptyDataError:
        raise LabError(f"--measured {path} is empty; give {shape}") from None
    except pd.errors.ParserError as err:
        raise LabError(f"--measured {path} is not a well-formed CSV ({str(err).strip()}); give {shape}") from None
    twice = [c for c in dict.fromkeys(header) if header.count(c) > 1] 
    if twice:  # pandas would rename the second to "mops.1" and read only the first
        where = [str(i + 1) for i, c in enumerate(header) if c == twice[0]]
        raise LabError(f"--measured {path}: the column {twice[0]} appears {len(where)} times (columns "
                       f"{', '.join(where)}); delete all but the one you mean")
    missing = [c for c in ("arch", "kernel", "bench", "mops") if c not in table.columns]
    if missing:
        raise LabError(f"--measured {path} lacks the column(s) {', '.join(missing)}; give {shape}")
    if table.empty:
        raise LabError(f"--measured {path} has a header but no rows; give {shape}")
    for column in ("arch", "kernel", "bench", "mops"):
        blank = table.index[table[column].str.strip() == ""]
        if len(blank):  # an unbalanced quote swallows the rest of the file into one field, for one
            raise LabError(f"--measured {path}: line {blank[0] + 2} has no {column} (a stray quote or a "
                           f"missing field?); give {shape}")
    mops = pd.to_numeric(table["mops"], errors="coerce")
    bad = ~(mops.between(MIN_MOPS, MAX_MOPS))  # NaN too
    if bad.any():
        i = int(bad.to_numpy().argmax())
        raise LabError(f"--measured {path}: line {i + 2} has mops {table['mops'].iloc[i]!r}; mops is a measured "
                       f"rate in millions of calls per second, a number of at least {MIN_MOPS} and at most "
                       f"{MAX_MOPS:g}")
    return table.assign(mops=mops)
