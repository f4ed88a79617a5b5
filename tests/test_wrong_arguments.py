"""Public functions given an argument of the wrong type say what they expected (a LabError), instead of an
AttributeError or TypeError from deep inside."""
import errno
import os
import re
import threading

import pytest

import uprobe_lab as ul
from uprobe_lab.native import run_native_benches
from uprobe_lab.native.perf import ProbeRefused, UprobeEvent, probe_refused
from uprobe_lab.own_program import FunctionSite, hit_verdict, measure_probe
from uprobe_lab.smp import call_on_cpus
from native_support import native

PROC = ul.new_process()
PROBE = ul.attach(PROC, "uprobe_target_ret", COUNTER := ul.CountingConsumer())
SITE = FunctionSite("/bin/true", "main", 0x1000, 0x1000, 1, b"\x90")

REFUSED = {
    "attach without a process": (lambda: ul.attach(None, "uprobe_target_nop", ul.CountingConsumer()),
                                 "needs a process to probe, got None: make one with new_process"),
    "attach at a text offset": (lambda: ul.attach(PROC, "uprobe_target_nop", ul.CountingConsumer(), offset="1"),
                                "offset into the symbol is an int of bytes, got '1'"),
    "attach at a float": (lambda: ul.attach(PROC, 4.5, ul.CountingConsumer()),
                          "probes a symbol by name .* or an address \\(an int\\), got 4.5"),
    "call None": (lambda: PROC.call(None), "call a symbol of the program by name .* got None"),
    "call an arm64 process with None": (lambda: ul.new_process("arm64").call(None), "got None"),
    "analyze a list": (lambda: ul.analyze([0x90]), "as hex text .* or bytes .* got \\[144\\]"),
    "a kernel as a float": (lambda: ul.new_process(kernel=6.10), "write the kernel version as a string, e.g. '6.10'"),
    "an arch as a list": (lambda: ul.new_process(["x86_64"]), "unknown architecture \\['x86_64'\\]: the lab emulates"),
    "an arch of 100k characters": (lambda: ul.events_per_hit("uprobe-nop", "x" * 100_000),
                                   "unknown architecture 'xxx.*\\(100,002 characters\\): the lab emulates"),
    "a kernel as a huge int": (lambda: ul.new_process(kernel=10 ** 5000), "as a string, e.g. '6.10', got an int of"),
    "a kernel of 100k characters": (lambda: ul.new_process(kernel="6" * 100_000),
                                    "unknown kernel version '6666.*\\(100,002 characters\\): the lab models"),
    "detach None": (lambda: ul.detach(PROC, None, COUNTER), "detach\\(\\) needs the probe attach\\(\\) returned, got None"),
    "detach from None": (lambda: ul.detach(None, PROBE, COUNTER), "detach\\(\\) needs the process the probe is in"),
    "events of None": (lambda: ul.events_per_hit(None), "the bench is named by a string such as 'uprobe-nop', got None"),
    "events of a list": (lambda: ul.events_per_hit(["uprobe-nop"]), "named by a string .* got \\['uprobe-nop'\\]"),
    "hit_verdict of text": (lambda: hit_verdict("zz", 0x1000, "6.18"), "'zz' is not hex bytes"),
    "hit_verdict of None": (lambda: hit_verdict(None, 0x1000, "6.18"), "give the instruction's bytes, e.g."),
    "hit_verdict of no bytes": (lambda: hit_verdict(b"", 0x1000, "6.18"), "instruction's bytes, .* got b''"),
    "hit_verdict at -1": (lambda: hit_verdict(b"\x90", -1, "6.18"), "vaddr is the instruction's address, an int"),
    "hit_verdict at 2**64": (lambda: hit_verdict(b"\x90", 1 << 64, "6.18"), "from 0 to 2\\*\\*64 - 1"),
    "hit_verdict at text": (lambda: hit_verdict(b"\x90", "0x1000", "6.18"), "got '0x1000'"),
    "measure 0 calls": (lambda: measure_probe(SITE, os.getpid, calls=0), "calls is an int from 1 to 10,000,000"),
    "measure 10**12 calls": (lambda: measure_probe(SITE, os.getpid, calls=10 ** 12), "got calls=1000000000000"),
    "measure 0 repeats": (lambda: measure_probe(SITE, os.getpid, repeats=0), "repeats=0"),
    "measure a float": (lambda: measure_probe(SITE, os.getpid, calls=1.5), "calls=1.5"),
    "measure no site": (lambda: measure_probe(None, os.getpid), "needs the site to probe, got None"),
    "measure no call": (lambda: measure_probe(SITE, None), "call is the function that calls the probed one"),
    "a probe on no path": (lambda: UprobeEvent(None, 0), "a uprobe goes on a file: give its path"),
    "a probe on a NUL path": (lambda: UprobeEvent("/bin/t\0rue", 0), "without NUL"),
    "a probe at -1": (lambda: UprobeEvent("/bin/true", -1), "the offset is where in the file the probe goes"),
    "a probe at 2**64": (lambda: UprobeEvent("/bin/true", 1 << 64), "an int from 0, got 18446744073709551616"),
    "a probe at text": (lambda: UprobeEvent("/bin/true", "5"), "got '5'"),
    "call_on_cpus of None": (lambda: call_on_cpus(None, "uprobe_target_nop"),
                             "call_on_cpus\\(\\) needs a process, got None: make one with new_process"),
    "call_on_cpus with 0 insns": (lambda: call_on_cpus(ul.new_process(cpus=2), "uprobe_target_nop", max_insns=0),
                                  "max_insns must be an int from 1 to 1_000_000_000, got 0"),
    "call_on_cpus with text insns": (lambda: call_on_cpus(ul.new_process(cpus=2), "uprobe_target_nop",
                                                          max_insns="9"), "max_insns must be an int .* got '9'"),
}


@pytest.mark.parametrize("case", REFUSED)
def test_a_wrong_type_is_named_with_what_was_expected(case):
    call, message = REFUSED[case]
    with pytest.raises(ul.LabError, match=message):
        call()


def test_instructions_as_bytes_or_an_int_word_are_understood():
    assert ul.analyze(b"\x90")["action"] == ul.analyze("90")["action"]
    assert ul.analyze(0xD503201F, "arm64") == ul.analyze("d503201f", "arm64")


def test_native_benches_are_asked_for_by_a_list_of_names():
    with pytest.raises(ValueError, match=r"names is a list of bench names: run_native_benches\(\['uprobe-nop'\]\)"):
        run_native_benches("uprobe-nop")
    with pytest.raises(ValueError, match="iterations and repeats are ints, got '10' and 1"):
        run_native_benches(["uprobe-nop"], iterations="10", repeats=1)
    with pytest.raises(ValueError, match="bench names are strings such as 'uprobe-nop', got None"):
        run_native_benches(names=[None])
    with pytest.raises(ValueError, match="names is a list of bench names, e.g. \\['uprobe-nop'\\], got 5"):
        run_native_benches(names=5)


def test_hit_verdict_takes_the_bytes_as_hex_text_too():
    assert hit_verdict("55", 0x1000, "6.18") == hit_verdict(b"\x55", 0x1000, "6.18")


# the kernel's answer to a uprobe it refuses for a reason of the caller's: (errno, path, offset, a regex)
REFUSALS = {
    "no file": (errno.ENOENT, "/nonexistent/lib.so", 0, "no file /nonexistent/lib.so: give the path of an ELF file"),
    "the instruction": (524, "/bin/true", 1, r"refuses to probe the instruction at offset 0x1 of /bin/true \(ENOTSUPP\)"),
    "a directory": (errno.EINVAL, "/", 0, "/ is not a regular file"),
    "past the end": (errno.EINVAL, "/bin/true", 1 << 40, "offset 0x10000000000 of /bin/true is past the file's end"),
    "anything else": (errno.EIO, "/bin/true", 0, r"perf_event_open refused a uprobe at offset 0x0 of /bin/true \(EIO"),
    "a long path": (errno.ENAMETOOLONG, "/x" * 50_000, 0, "of '/x/x.*\\(100,002 characters\\) \\(ENAMETOOLONG"),
}


@pytest.mark.parametrize("case", REFUSALS)
def test_a_refused_uprobe_says_why_in_words_and_keeps_its_errno(case):
    number, path, offset, words = REFUSALS[case]
    err = probe_refused(OSError(number, os.strerror(number)), path, offset)
    assert isinstance(err, ul.LabError) and isinstance(err, OSError) and err.errno == number
    assert re.search(words, str(err)) and len(str(err)) < 600, str(err)


@native
@pytest.mark.parametrize("path, offset, number", [("/nonexistent/lib.so", 0, errno.ENOENT), ("/", 0, errno.EINVAL),
                                                  ("/bin/true", 1 << 40, errno.EINVAL)])
def test_this_kernel_refuses_such_uprobes_with_those_errnos(path, offset, number):
    with pytest.raises(ProbeRefused) as info, UprobeEvent(path, offset):
        pass
    assert info.value.errno == number


def test_two_threads_calling_one_fresh_process_on_its_cpus_get_a_clear_error():
    """The threads' stacks are mapped under the process's lock: a second caller is refused before it maps one
    (it was a raw UcError(UC_ERR_MAP) in 9 of 20 tries)."""
    for _ in range(10):
        proc = ul.new_process(cpus=4)
        target = proc.program.resolve("uprobe_target_nop")
        errors, barrier = [], threading.Barrier(2)

        def call():
            barrier.wait()
            try:
                call_on_cpus(proc, "producer_loop", 200, target)
            except Exception as err:
                errors.append(err)
        threads = [threading.Thread(target=call) for _ in range(2)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert all(isinstance(e, ul.LabError) and "another thread is calling this process" in str(e) for e in errors)


def test_code_that_never_returns_stops_on_its_cpus_as_soon_as_in_a_call():
    proc = ul.new_process(cpus=4)
    target = proc.program.resolve("uprobe_target_nop")
    with pytest.raises(ul.LabError, match="without all returning; give a larger max_insns"):
        call_on_cpus(proc, "producer_loop", 10 ** 12, target)
    # the default budget is proc.call's: a tenth of it runs out too, and so does proc.call's own
    with pytest.raises(ul.LabError, match="ran 1_000_000 instructions"):
        call_on_cpus(proc, "producer_loop", 10 ** 12, target, max_insns=1_000_000)
    sched = call_on_cpus(proc, "producer_loop", 5, target, max_insns=10_000)
    assert all(t.done for t in sched.threads)
