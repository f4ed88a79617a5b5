"""A longer run of tests/test_stress_stops.py: more interrupts, longer delays, every stepper Reset.

    python benchmarks/stress_stops.py [--interrupts 2000] [--max-delay 0.1]

Prints how many interrupts and resets were made and checked (uprobe_lab.stress), and how long it took;
then how soon Ctrl-C stops an emulated run of each bench and the native loop (the prompt-stop figures,
which the unit tests leave out: a time bound there fails on a loaded machine, not on a slow stop).
"""
import _thread
import argparse
import os
import statistics
import sys
import threading
import time

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from uprobe_lab.bench import bench_process  # noqa: E402
from uprobe_lab.process import MAX_INSNS  # noqa: E402
from uprobe_lab.stress import ctrl_c_once_running, interrupt_stress, notebook_steppers, reset_stress  # noqa: E402

STOP_CASES = [(a, n) for a in ("x86_64", "arm64") for n in ("uprobe-ret", "uretprobe-nop", "syscall-count",
                                                             "usermode-count")]


def emulated_stop_seconds(arch: str, name: str, rounds: int) -> list[float]:
    """Seconds from Ctrl-C (sent once the run is under way) to KeyboardInterrupt in the caller, per round."""
    proc, _, target = bench_process(name, arch, "6.18", record=False)
    out = []
    for _ in range(rounds):
        done, sent = threading.Event(), []
        thread = ctrl_c_once_running(done, sent)
        try:
            proc.call("producer_loop", 10 ** 9, target, max_insns=MAX_INSNS)
        except KeyboardInterrupt:
            out.append(time.perf_counter() - sent[0])
        finally:
            done.set()
            thread.join()
    return out


def native_stop_seconds(rounds: int) -> list[float]:
    """The same for NativeCode.run's loop of real calls (acted on between two chunks of native code)."""
    from uprobe_lab.native.code import NativeCode

    out = []
    with NativeCode() as nc:
        for _ in range(rounds):
            sent = []

            def interrupt_inside_run():
                main = threading.main_thread().ident
                while getattr(sys._current_frames().get(main), "f_code", None) is not NativeCode.run.__code__:
                    time.sleep(0.001)
                sent.append(time.perf_counter())
                _thread.interrupt_main()

            thread = threading.Thread(target=interrupt_inside_run, daemon=True)
            thread.start()
            try:
                nc.run("uprobe_target_nop", 10 ** 12)
            except KeyboardInterrupt:
                out.append(time.perf_counter() - sent[0])
            thread.join()
    return out


def print_stop_seconds(rounds: int = 5) -> None:
    print(f"Ctrl-C to KeyboardInterrupt, seconds (median / max of {rounds}; the goal is well under 1):")
    for arch, name in STOP_CASES:
        got = sorted(emulated_stop_seconds(arch, name, rounds))
        print(f"  emulated {arch:<7} {name:<15} {statistics.median(got):.3f} / {got[-1]:.3f}")
    try:
        got = sorted(native_stop_seconds(rounds))
    except Exception as err:  # noqa: BLE001 - no exec dir here, say so and go on
        print(f"  native loop: not run here ({err})")
        return
    print(f"  native loop                      {statistics.median(got):.3f} / {got[-1]:.3f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--interrupts", type=int, default=2000)
    parser.add_argument("--max-delay", type=float, default=0.1, help="seconds: each interrupt comes after a "
                        "random delay up to this")
    args = parser.parse_args()
    t0 = time.perf_counter()
    counts = interrupt_stress(args.interrupts, args.max_delay, seed=int(time.time()))
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
    print_stop_seconds()


if __name__ == "__main__":
    main()
