"""The course's chapters, listed once: the welcome chapter's table and the README's are written from this list
(``python -m uprobe_lab.chapters`` rewrites both), and a test holds the notebooks, their titles and times to it.

The site builds its index from the notebook files themselves, which the same test holds to this list."""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


@dataclass(frozen=True)
class Chapter:
    stem: str  # the notebook's file name without .ipynb
    title: str  # its first heading
    minutes: int  # as its "In this chapter" cell states
    idea: str  # one line, for the welcome chapter
    learn: str  # what a learner comes away with, for the README

    @property
    def number(self) -> str:
        return self.stem.split("_")[0]


CHAPTERS = (
    Chapter("00_welcome", "00 · Welcome to uprobe_lab", 10,
            "what a uprobe is and what one hit costs",
            "what a uprobe is, what one hit costs in events, how the course works"),
    Chapter("01_breakpoint_uprobes", "01 · Breakpoint uprobes", 30,
            "int3, the consumers, emulate vs single-step; why `ret` costs two traps",
            "int3 over the probed instruction, the trap, consumers, emulate vs single-step out of line; why `ret` "
            "costs two traps; a nop5 hit stepped on each kernel 6.10-7.3; what the kernel refuses"),
    Chapter("02_uretprobes", "02 · Uretprobes and the syscall trampoline", 30,
            "hijacking the return address; the int3 vs the syscall trampoline",
            "the return-address hijack on a stack view; one probed return stepped instruction by instruction "
            "through the int3 trampoline (6.10) or the syscall trampoline (6.11+), picked with a kernel selector; "
            "why it saves rax/rcx/r11; the broken variant; SIGILL for a stray `syscall 335`"),
    Chapter("03_nop5_optimization", "03 · The optimised uprobe on 6.18: nop5", 30,
            "rewriting a 5-byte nop into a `call` to a user-space trampoline",
            "6.18's optimised uprobe: why nop5 (the int3 cost); the `call [uprobes-trampoline]`, the staged int3 "
            "patching and what another CPU decodes at each stage; sys_uprobe; the page-crossing limit; the "
            "red-zone hazard and libbpf's USDT revert"),
    Chapter("03b_nop10_optimization", "03b · The optimised uprobe on 7.3 (and 7.2.y): nop10", 25,
            "7.3 moves the optimisation to a 10-byte nop, and what that fixes",
            "7.3's optimised uprobe (and 7.2.y's, from 7.2.6): the nop10 (`lea -0x80(%rsp),%rsp; call`, `ret $0x80`), its "
            "staged rewrite and "
            "unoptimise; sysret or iret; -ENXIO vs -EPROTO; why the red zone survives; fork; events per hit "
            "6.16 / 6.18 / 7.3 for nop, nop5, nop10 and the USDT shapes"),
    Chapter("04_arm64_stp", "04 · arm64: BRK uprobes and the STP fp/lr simulation", 30,
            "BRK uprobes and simulating `stp x29, x30, [sp, #-16]!`",
            "BRK uprobes; simulated vs single-stepped instructions; simulating `stp x29, x30, [sp, #-16]!`; the "
            "seed's Redis and grep figures; why the patch stalled"),
    Chapter("05_reproducing_benchmarks", "05 · Reproducing the published benchmarks", 30,
            "the published tables, explained event by event",
            "every published table beside a cost model built from the emulator's event counts; what an upgrade "
            "buys"),
    Chapter("06_your_machine", "06 · Your machine", 20,
            "the same bytes probed by your own kernel",
            "the same bytes on this machine's kernel (perf's uprobe PMU; a recorded run where that is not "
            "possible), a profile fitted to this machine, the host's trampolines beside the emulator's"),
    Chapter("07_many_cpus", "07 · Many CPUs, one probe", 30,
            "many CPUs hitting one probe: what a hit shares, and the published scaling curves",
            "N CPUs hitting one probe (`bench -p N`): the kernel state each hit shares on 6.8-6.18 lit up per "
            "kernel and CPU count, cache lines moving between CPUs, XOL slots running out, the published scaling "
            "curves of 2024-25 beside a contention model (and where it misses), this machine's own curve"),
    Chapter("08_your_program", "08 · Probing a program of your own", 30,
            "a probe on your own program; a capstone and a quiz over the course",
            "probing a program of your own: the function's file offset from its ELF symbols, what each kernel "
            "does with its first instruction, a real probe with the lab's native route and `perf probe`; a "
            "capstone (a busy service's overhead as a uprobe, a USDT nop5 on 6.18, a nop10 on 7.3) and a "
            "ten-question quiz over the course"),
)


def total_minutes() -> int:
    return sum(c.minutes for c in CHAPTERS)


def welcome_table() -> str:
    """The welcome chapter's table: every chapter, linked, with its idea."""
    rows = [f"| [{c.title}]({c.stem}.ipynb) | {c.idea} |" for c in CHAPTERS]
    return "\n".join(["| chapter | idea |", "|---|---|", *rows])


def readme_table() -> str:
    """The README's table: every chapter with its time and what it teaches."""
    rows = [f"| `{c.stem}` | {c.minutes} min | {c.learn} |" for c in CHAPTERS]
    return "\n".join(["| chapter | time | what you learn |", "|---|---|---|", *rows])


TABLE = re.compile(r"^\| chapter \|.*?(?=\n(?!\|)|\Z)", re.S | re.M)  # a chapter table: its lines up to the next non-row


def with_table(text: str, table: str) -> str:
    """``text`` with its chapter table replaced by ``table``."""
    if not TABLE.search(text):
        raise ValueError("no chapter table (a line starting '| chapter |') to replace")
    return TABLE.sub(lambda _: table, text, count=1)


def write() -> None:
    """Rewrite the README's and the welcome chapter's tables from CHAPTERS (the welcome cell keeps its id)."""
    import nbformat

    readme = REPO / "README.md"
    readme.write_text(with_table(readme.read_text(), readme_table()))
    path = REPO / "notebooks" / f"{CHAPTERS[0].stem}.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.cell_type == "markdown" and TABLE.search(c.source))
    cell.source = with_table(cell.source, welcome_table())
    nbformat.write(nb, path)


if __name__ == "__main__":
    write()
