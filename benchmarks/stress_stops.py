"""A longer run of tests/test_stress_stops.py: more interrupts, longer delays, every stepper Reset.

    PYTHONPATH=. python benchmarks/stress_stops.py [interrupts] [max_delay_s]

Prints how many interrupts and resets were made and checked, and how long it took.
"""
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests"))

from test_stress_stops import interrupt_stress, notebook_steppers, reset_stress  # noqa: E402


def main() -> None:
    trials = int(sys.argv[1]) if len(sys.argv) > 1 else 2000
    max_delay = float(sys.argv[2]) if len(sys.argv) > 2 else 0.1
    t0 = time.perf_counter()
    counts = interrupt_stress(trials, max_delay, seed=int(time.time()))
    print(f"interrupts: {counts['interrupts']} over {counts['combinations']} (arch, kernel, bench) processes "
          f"({len(counts['refused'])} combinations refused at attach, as the kernel does), each followed by an exact "
          f"call; {time.perf_counter() - t0:.1f} s")
    t0 = time.perf_counter()
    total = 0
    for name, make, target in notebook_steppers():
        resets = reset_stress(name, make, target)
        total += resets
        print(f"  {name}: {resets} resets")
    print(f"resets: {total} over {len(list(notebook_steppers()))} steppers; {time.perf_counter() - t0:.1f} s")


if __name__ == "__main__":
    main()
