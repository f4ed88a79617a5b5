"""Is the lab's native number the kernel's number? Compare it with a C program on the same bytes.

The C program (generated and compiled in a temp dir, never committed) carries the lab's whole
bench image in its own .text, page aligned, so the probed instruction, the producer loop and even
the page offsets are byte-for-byte the lab's. It probes itself through perf_event_open on
/proc/self/exe with an event of every task on its pinned CPU (as bench_trigger.c's libbpf attach and the lab
open theirs), hands the event the lab's BPF consumer (a program of :class:`uprobe_lab.native.bpf.BpfCounter`,
inherited as a file descriptor: the same consumer, whose map counts the C program's hits), times the same
intervals and prints M/s. This script runs it and the lab's ``run_native_benches`` alternately and prints
the lab/C throughput ratio (expected within 10%).

    python benchmarks/native_vs_c.py [--bench uprobe-nop] [--iterations N] [--repeats R] [--rounds K]

Needs root (CAP_SYS_ADMIN) and a C compiler (`cc`). The lab itself compiles nothing: only this script and
benchmarks/single_step_trap.py use a compiler.
"""
from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.bench import bench_spec  # noqa: E402
from uprobe_lab.native import NativeUnavailable, check_native_support, run_native_benches  # noqa: E402
from uprobe_lab.native.arch import load_bench_program  # noqa: E402
from uprobe_lab.native.bpf import BpfCounter  # noqa: E402
from uprobe_lab.native.bench import BENCH_NAMES  # noqa: E402
from uprobe_lab.native.perf import retprobe_bit, uprobe_pmu_type  # noqa: E402

C_MAIN = r"""
#define _GNU_SOURCE
#include <linux/perf_event.h>
#include <math.h>
#include <sched.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

extern const unsigned char lab_image[];
typedef void (*producer_t)(uint64_t n, const void *target);

/* file offset of addr in our own executable, from /proc/self/maps */
static long file_offset(const void *addr, char *path, size_t len)
{
	FILE *f = fopen("/proc/self/maps", "r");
	char line[4096];
	unsigned long lo, hi, off, a = (unsigned long)addr;
	long res = -1;
	while (f && fgets(line, sizeof(line), f)) {
		char name[4096] = "";
		if (sscanf(line, "%lx-%lx %*s %lx %*s %*s %4095s", &lo, &hi, &off, name) >= 3 && lo <= a && a < hi) {
			res = (long)(a - lo + off);
			snprintf(path, len, "%s", name);
			break;
		}
	}
	if (f)
		fclose(f);
	return res;
}

static double now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int main(int argc, char **argv)
{
	if (argc != 9) {
		fprintf(stderr, "usage: %s pmu_type retbit producer_off target_off retprobe iterations repeats bpf_prog_fd\n",
			argv[0]);
		return 2;
	}
	int prog_fd = atoi(argv[8]);
	int pmu_type = atoi(argv[1]), retbit = atoi(argv[2]), retprobe = atoi(argv[5]);
	long producer_off = atol(argv[3]), target_off = atol(argv[4]);
	uint64_t n = strtoull(argv[6], NULL, 0);
	int repeats = atoi(argv[7]);
	producer_t loop = (producer_t)(lab_image + producer_off);
	const void *target = lab_image + target_off;

	cpu_set_t allowed, set; /* the first CPU it may run on, as the bench's -a and the lab pin */
	int cpu = 0;
	sched_getaffinity(0, sizeof(allowed), &allowed);
	while (cpu < CPU_SETSIZE - 1 && !CPU_ISSET(cpu, &allowed))
		cpu++;
	CPU_ZERO(&set);
	CPU_SET(cpu, &set);
	sched_setaffinity(0, sizeof(set), &set);

	char path[4096];
	long off = file_offset(target, path, sizeof(path));
	if (off < 0) {
		fprintf(stderr, "target not found in /proc/self/maps\n");
		return 1;
	}
	struct perf_event_attr attr;
	memset(&attr, 0, sizeof(attr));
	attr.type = pmu_type;
	attr.size = sizeof(attr);
	attr.config = retprobe ? 1ULL << retbit : 0;
	attr.config1 = (uint64_t)(unsigned long)path; /* uprobe_path */
	attr.config2 = off;                            /* probe_offset */
	/* every task, on the pinned CPU: as bench_trigger.c's libbpf attach and the lab open theirs */
	int fd = syscall(__NR_perf_event_open, &attr, -1, cpu, -1, PERF_FLAG_FD_CLOEXEC);
	if (fd < 0) {
		perror("perf_event_open");
		return 1;
	}
	if (ioctl(fd, PERF_EVENT_IOC_SET_BPF, prog_fd) < 0) {
		perror("PERF_EVENT_IOC_SET_BPF");
		return 1;
	}
	loop(n / 10 > 1000 ? n / 10 : 1000, target); /* warm-up; a nop5 is optimised on its first hit */
	printf("warm\n");
	fflush(stdout);
	if (getchar() != 'g') /* the parent reads the consumer's count between warm-up and timing */
		return 1;
	double sum = 0, sq = 0;
	for (int r = 0; r < repeats; r++) {
		double t0 = now_ns();
		loop(n, target);
		double mops = n * 1e3 / (now_ns() - t0);
		sum += mops;
		sq += mops * mops;
	}
	double mean = sum / repeats;
	double sd = repeats > 1 ? sqrt((sq - repeats * mean * mean) / (repeats - 1)) : 0;
	printf("%.6f %.6f\n", mean, sd);
	close(fd);
	return 0;
}
"""


def c_source(image: bytes) -> str:
    rows = [", ".join(f"0x{b:02x}" for b in image[i : i + 32]) for i in range(0, len(image), 32)]
    body = "\n".join(f'\t".byte {r}\\n"' for r in rows)
    return (C_MAIN + '\n__asm__(".text\\n\\t.p2align 12\\n\\t.globl lab_image\\nlab_image:\\n"\n'
            + body + '\n\t".p2align 12\\n");\n')


def build(tmp: str) -> tuple[str, object]:
    program = load_bench_program()()
    src = os.path.join(tmp, "native_vs_c.c")
    exe = os.path.join(tmp, "native_vs_c")
    with open(src, "w") as f:
        f.write(c_source(program.code))
    subprocess.run(["cc", "-O2", "-o", exe, src, "-lm"], check=True)
    return exe, program


def run_c(exe: str, program, bench: str, iterations: int, repeats: int) -> tuple[float, float, int]:
    """(mean M/s, stddev, consumer runs over the timed intervals) of one run of the C program."""
    b = bench_spec(bench)
    off = lambda name: program.resolve(name) - program.base  # noqa: E731
    with BpfCounter() as counter:
        args = [exe, str(uprobe_pmu_type()), str(retprobe_bit()), str(off("producer_loop")), str(off(b.target)),
                "1" if b.probe == "uretprobe" else "0", str(iterations), str(repeats), str(counter.prog_fd)]
        with subprocess.Popen(args, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                              pass_fds=(counter.prog_fd,)) as proc:
            # readline then communicate is safe: the program writes nothing between "warm" and reading 'g'
            if proc.stdout.readline().strip() != "warm":
                raise RuntimeError(f"the C program stopped before timing (exit status {proc.wait()})")
            before = counter.count()
            out, _ = proc.communicate("g")
            if proc.returncode:
                raise RuntimeError(f"the C program failed (exit status {proc.returncode})")
        mean, sd = map(float, out.split())
        return mean, sd, counter.count() - before


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bench", default="uprobe-nop", choices=[n for n in BENCH_NAMES if bench_spec(n).probe])
    ap.add_argument("--iterations", type=int, default=200_000)
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    if not shutil.which("cc"):
        print("no C compiler (cc) on this machine: nothing to compare against")
        return 0
    try:
        check_native_support()
    except NativeUnavailable as e:
        print(f"native mode unavailable: {e}")
        return 0
    lab_means, c_means = [], []
    with tempfile.TemporaryDirectory(prefix="uprobe_lab-c-") as tmp:
        exe, program = build(tmp)
        print(f"{args.bench}: {args.rounds} rounds x {args.repeats} intervals x {args.iterations} calls, "
              f"kernel {os.uname().release}")
        print(f"{'round':>5}  {'C M/s':>17}  {'lab M/s':>17}  {'lab/C':>6}")
        for i in range(args.rounds):
            c_mean, c_sd, c_hits = run_c(exe, program, args.bench, args.iterations, args.repeats)
            (r,) = run_native_benches([args.bench], args.iterations, args.repeats)
            want = args.iterations * args.repeats
            if c_hits != want or r["hits"] != want:
                print(f"hit counts differ from {want}: C {c_hits}, lab {r['hits']}")
            c_means.append(c_mean)
            lab_means.append(r["mops"])
            print(f"{i:>5}  {c_mean:8.3f} ± {c_sd:6.3f}  {r['mops']:8.3f} ± {r['stddev']:6.3f}  "
                  f"{r['mops'] / c_mean:6.3f}")
    ratio = statistics.fmean(lab_means) / statistics.fmean(c_means)
    verdict = "within 10%" if abs(ratio - 1) <= 0.10 else "OUTSIDE 10%"
    print(f"lab/C throughput ratio over all rounds: {ratio:.3f} ({verdict})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
