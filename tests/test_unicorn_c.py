"""uprobe_lab.unicorn_c: the direct C calls and the public-API fallback give the same emulation."""
import pytest

import uprobe_lab as ul
from uprobe_lab import unicorn_c


def _a_run(arch: str) -> tuple:
    proc = ul.new_process(arch, kernel="6.18")
    counter = ul.CountingConsumer()
    ul.attach(proc, "uprobe_target_ret", counter)
    ul.attach(proc, "uprobe_target_push", counter)
    proc.call("producer_loop", 5, proc.program.resolve("uprobe_target_ret"))
    proc.call("producer_loop", 3, proc.program.resolve("uprobe_target_push"))
    return counter.hits, dict(proc.trace.counts), proc.regs().as_dict(), proc.read(proc.regs().get("sp") - 64, 64)


@pytest.mark.parametrize("arch", ["x86_64", "arm64"])
def test_the_public_api_fallback_emulates_what_the_direct_calls_do(monkeypatch, arch):
    assert unicorn_c.DIRECT  # unicorn 2.1, as pyproject.toml pins it
    direct = _a_run(arch)
    monkeypatch.setattr(unicorn_c, "DIRECT", False)
    fallback = _a_run(arch)
    assert direct[0] == fallback[0] == 8
    assert fallback == direct


def test_an_unmapped_address_reads_as_none_either_way(monkeypatch):
    for direct in (True, False):
        monkeypatch.setattr(unicorn_c, "DIRECT", direct)
        proc = ul.new_process()
        assert proc.read_page(0x10, 8) is None and proc.read_page(proc.program.base, 1) is not None
