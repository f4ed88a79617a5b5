"""The x86-64 side of the differential fuzzer (uprobe_lab.fuzz): programs, state, mechanisms, and
the one known divergence, the 6.18 nop5 red-zone hazard.

A divergence is classified ``red-zone`` when it is exactly that hazard: a nop5 site ran optimised,
and the unprobed program, with the four words the ``call`` and the trampoline push (rax, r11, rcx,
return address at sp-32..sp-1 of the site, all inside the 128-byte red zone) written at every
optimised hit, ends in the probed run's state bit for bit. 7.3's optimised nop10 (``nop10-opt``)
moves sp below the red zone before its call, so any divergence there is a ``BUG``.
"""
from __future__ import annotations

from unicorn import UC_HOOK_CODE

from ..fuzz_target import Config
from ..kernel import KERNELS, get_kernel
from .constants import STACK_TOP
from .optimize import UPROBE_SYSCALL_ARGS_SIZE, is_optimized
from .process import GPRS
from .randprog import FUZZ_DATA, fuzz_program

ARITHMETIC_FLAGS = 0x8D5  # CF PF AF ZF SF OF


class X86FuzzTarget:
    arch = "x86_64"
    entry = "fuzz_main"
    trace_registers = ()

    def configs(self) -> list[Config]:
        return [Config(self.arch, name, name) for name in KERNELS]

    def program(self, rng, size):
        return fuzz_program(rng, **({"n": size} if size else {}))

    def load(self, proc, program) -> None:
        proc.load(program, "/lab/fuzz")
        proc.map("/lab/fuzz-data", FUZZ_DATA, 0x1000, "rw-p")

    def args(self, seed: int) -> tuple[int, ...]:
        return ()

    def final_state(self, proc) -> dict:
        regs = proc.regs()
        state = {name: regs.get(name) for name in GPRS}
        state["flags"] = regs.get("flags") & ARITHMETIC_FLAGS
        state["stack"] = (regs.sp, proc.read(regs.sp, STACK_TOP - regs.sp))
        state["data"] = (FUZZ_DATA, proc.read(FUZZ_DATA, 0x1000))
        return state

    def special_sites(self, insns) -> list[int]:
        # nop5 (optimised on 6.18) and nop10 (optimised on 7.3 and 7.2.y, refused before) sites
        return [addr for addr, raw in insns if len(raw) in (5, 10) and raw[:2] in (b"\x0f\x1f", b"\x66\x2e")]

    def record_hit(self, proc, vaddr: int, regs) -> tuple:
        """(site optimised?, sp, ax, r11, cx): what a trampoline call would have pushed."""
        return is_optimized(proc, vaddr), regs.sp, regs.ax, regs.r11, regs.cx

    def mechanism(self, proc, uprobe, records: list, ret: bool) -> str:
        if ret:
            return "uretprobe-syscall" if proc.kernel.uretprobe_syscall else "uretprobe-int3"
        if any(r[0] for r in records):
            return "nop10-opt" if proc.kernel.optimize_nop10 else "nop5-opt"
        return uprobe.auprobe.action

    def return_trace(self, proc) -> None:
        return None

    def classify(self, config: Config, vaddr, records: list, got: dict, replay) -> str:
        kernel = get_kernel(config.kernel)
        if vaddr is None or not kernel.optimize_nop5:  # 7.3's nop10 call is below the red zone
            return "BUG"
        if not any(r[0] for r in records) or "error" in got:
            return "BUG"
        # the pushed words lie within the 128 bytes below the site's sp by construction; the replay checks
        # that those words, and nothing else, explain the whole difference
        hits = iter(records)

        def on_site(uc, address, size, user_data):
            optimised, sp, ax, r11, cx = next(hits, (False, 0, 0, 0, 0))
            if optimised:
                words = (ax, r11, cx, vaddr + 5)  # lowest address first: the trampoline's pushes, then the call's
                uc.mem_write(sp - UPROBE_SYSCALL_ARGS_SIZE, b"".join(w.to_bytes(8, "little") for w in words))

        replayed = replay(lambda proc: proc.uc.hook_add(UC_HOOK_CODE, on_site, None, vaddr, vaddr))
        return "red-zone" if replayed == got else "BUG"


TARGET = X86FuzzTarget()
