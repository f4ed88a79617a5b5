"""What a single-step trap costs on this machine next to a breakpoint trap, without uprobes.

    python benchmarks/single_step_trap.py [--calls 100000] [--rounds 5]

The cost model does not carry the recordings' ``xol_step`` price to CPUs that run natively, because on
the recording VMs an out-of-line step (uprobe-ret) costs several microseconds: the single step's #DB
is far dearer there than the #BP of an int3. This script asks the machine directly. A C program
(compiled in a temp dir, never committed) raises SIGTRAP ``calls`` times through an ``int3`` and as
many times by setting the trap flag (pushf; or TF; popf: the next instruction raises #DB), timing each
on its thread's CPU clock; the handler clears TF. Both paths deliver the same signal, so their
difference is the two exceptions' own. Figures, not assertions; needs a C compiler (``cc``), x86-64.
"""
from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile

C_SOURCE = r"""
#define _GNU_SOURCE
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <ucontext.h>

static void on_trap(int sig, siginfo_t *si, void *ctx)
{
	((ucontext_t *)ctx)->uc_mcontext.gregs[REG_EFL] &= ~0x100L;  /* TF off after the step */
}

static double now(void)
{
	struct timespec t;
	clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
	return t.tv_sec * 1e9 + t.tv_nsec;
}

int main(int argc, char **argv)
{
	long n = atol(argv[1]);
	struct sigaction sa;
	memset(&sa, 0, sizeof(sa));
	sa.sa_sigaction = on_trap;
	sa.sa_flags = SA_SIGINFO;
	sigaction(SIGTRAP, &sa, 0);
	double t0 = now();
	for (long i = 0; i < n; i++)
		__asm__ volatile("int3");
	double t1 = now();
	for (long i = 0; i < n; i++)
		__asm__ volatile("pushfq; orq $0x100, (%%rsp); popfq; nop" ::: "memory", "cc");
	double t2 = now();
	printf("%.1f %.1f\n", (t1 - t0) / n, (t2 - t1) / n);
	return 0;
}
"""


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=100_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    cc = shutil.which("cc") or shutil.which("gcc")
    if platform.machine() != "x86_64" or cc is None:
        print("needs an x86-64 machine and a C compiler (cc)", file=sys.stderr)
        return 2
    with tempfile.TemporaryDirectory() as tmp:
        src, exe = os.path.join(tmp, "trap.c"), os.path.join(tmp, "trap")
        with open(src, "w") as f:
            f.write(C_SOURCE)
        subprocess.run([cc, "-O2", "-o", exe, src], check=True)
        bp, db = [], []
        for _ in range(args.rounds):
            out = subprocess.run(["taskset", "-c", "0", exe, str(args.calls)] if shutil.which("taskset")
                                 else [exe, str(args.calls)], capture_output=True, text=True, check=True)
            a, b = map(float, out.stdout.split())
            bp.append(a)
            db.append(b)
            print(f"int3 -> SIGTRAP {a:6.0f} ns   single step (#DB) -> SIGTRAP {b:6.0f} ns   ratio {b / a:.2f}")
    print(f"median: #BP {statistics.median(bp):.0f} ns, #DB {statistics.median(db):.0f} ns, the step's extra "
          f"{statistics.median(db) - statistics.median(bp):.0f} ns per trap")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
