"""Does a kernel copy to user memory cost per byte or per call? Time read(2) of /dev/zero by size.

read of /dev/zero fills the user buffer with clear_user: one user access of the requested size, on
top of a syscall whose other work does not depend on the size. A 0-byte read skips the copy, so

* (8 bytes - 0 bytes) is an upper bound on starting one small copy (it also holds the file's read path,
  which a 0-byte readv skips);
* the slope from 8 to 4096 bytes is the cost per byte.

The cost model prices a kernel copy per call (``uaccess`` in uprobe_lab.model.prices), because the
uprobe paths copy 8 to 32 bytes at a time; this prints what that choice rests on, for this machine.

    python benchmarks/uaccess_size.py [--calls 20000] [--rounds 15]

Pinned to one CPU; each figure is the median over the rounds of the time per call.
"""
from __future__ import annotations

import argparse
import os
import statistics
import time

SIZES = (0, 8, 16, 32, 64, 512, 4096)


def ns_per_read(fd: int, size: int, calls: int, rounds: int) -> float:
    bufs = [bytearray(size)]
    per_call = []
    for _ in range(rounds):
        t0 = time.thread_time_ns()
        for _ in range(calls):
            os.readv(fd, bufs)
        per_call.append((time.thread_time_ns() - t0) / calls)
    return statistics.median(per_call)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20_000, help="reads per round and size")
    parser.add_argument("--rounds", type=int, default=15)
    args = parser.parse_args()
    os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[-1]})
    fd = os.open("/dev/zero", os.O_RDONLY)
    try:
        ns = {size: ns_per_read(fd, size, args.calls, args.rounds) for size in SIZES}
    finally:
        os.close(fd)
    for size, t in ns.items():
        print(f"read /dev/zero {size:5d} bytes: {t:7.1f} ns per call")
    per_byte = (ns[4096] - ns[8]) / (4096 - 8)
    print(f"the read path and one copy (8 bytes - 0 bytes): {ns[8] - ns[0]:.1f} ns")
    print(f"per byte (8 -> 4096 bytes): {per_byte:.3f} ns, so 64 bytes add {64 * per_byte:.1f} ns to a copy")


if __name__ == "__main__":
    main()
