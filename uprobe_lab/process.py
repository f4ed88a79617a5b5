"""An emulated process: a Unicorn CPU, an address space of named mappings, and signals.

The architecture subclasses (uprobe_lab.x86.process, uprobe_lab.arm64.process) add the register
layout and turn Unicorn's interrupts into kernel entries. Everything the kernel model does to the
process goes through this class: memory access (``read``/``write``, counted as uaccess when the
kernel copies from or to user memory), registers (``kernel_entry()``, the task's pt_regs for one
kernel entry; ``regs()``, a copy to read or change), mappings (``map``, shown like /proc/PID/maps), and signals (``force_sig``).
"""
from __future__ import annotations

import ctypes
import threading
from contextlib import contextmanager
from dataclasses import dataclass
from typing import Callable

from unicorn import UC_PROT_EXEC, UC_PROT_READ, UC_PROT_WRITE, Uc, UcError

from .arch_ops import ArchOps
from .constants import MASK64, PAGE_SIZE
from .errors import LabError, ProcessKilled, is_int, shown
from .contended import accesses
from .kernel import KernelVersion, get_kernel
from .sites import Mapping, mapping_at
from .stepper import Stepper
from .trace import Trace
from .interrupt import close_retired, deliver, retire_on_collect, sigint_stops
from .unicorn_c import batch_read, batch_write, memory_access, register_access
from .uprobes import MmUprobes, UprobeTask, uprobe_abort_xol, uprobe_dup_mmap
DEFAULT_MAX_INSNS = 10_000_000  # every run is guarded: no emulation can spin forever
MAX_INSNS = 1_000_000_000  # the largest budget a run takes: tens of seconds of emulation at the fastest
RUN_SLICE = 2_000_000  # instructions per emu_start: Ctrl-C is acted on between two (well under 1 s)


@dataclass
class RunResult:
    stop: str  # "until", "signal", "count" (instruction budget exhausted)
    ip: int
    signal: str | None = None
    reason: str = ""

    @property
    def ok(self) -> bool:
        return self.stop == "until"

    def __repr__(self) -> str:
        extra = f" {self.signal}" if self.signal else ""
        return f"<RunResult {self.stop}{extra} at {self.ip:#x}{': ' + self.reason if self.reason else ''}>"


def sys_getpgid(proc, regs) -> int:
    """getpgid(2) (kernel/sys.c): the lab's one process leads its own group, pid 1."""
    return 1


def check_max_insns(max_insns) -> None:
    """A run's budget: an int of instructions, up to the largest a run takes."""
    if not is_int(max_insns) or not 0 < max_insns <= MAX_INSNS:
        raise LabError(f"max_insns must be an int from 1 to {MAX_INSNS:_}, got {shown(max_insns)}")


def raise_for(result: RunResult) -> None:
    """Turn a run that did not reach its end into the error a call() should raise."""
    if result.signal:
        raise ProcessKilled(f"the emulated process died of {result.signal}: {result.reason}")
    raise LabError(result.reason)


class RegsView(ctypes.Structure):
    """A pt_regs-shaped block of the CPU registers, as the kernel sees them on entry.

    ``load()`` fills it with one batch read, as the entry code saves every register into pt_regs;
    ``flush()`` writes it back, as the exit path restores it, and only if something changed. Fields
    are as wide as Unicorn's registers (64 bits; arm64's NZCV 32): values wrap. A block flushed
    after the CPU moved on would put old values back: load, change, flush, within one stop.
    Subclasses set ``UC_REGS`` (pt_regs name -> Unicorn register id, in pt_regs order; the pc is
    called ``ip``), ``_fields_ = pt_regs_fields(UC_REGS)`` (with ``unfilled`` for the kernel's fields
    no Unicorn register fills, so the others keep the kernel's offsets) and ``__slots__ = ()``.
    """

    UC_REGS: dict[str, int] = {}
    __slots__ = ("_proc", "_read", "_write", "_entry")  # so a misspelt register is an error, not a new attribute

    def bind(self, proc: "EmulatedProcess") -> "RegsView":
        """Tie this block to a process's CPU: the batch calls get a pointer to each field."""
        cls, base = type(self), ctypes.addressof(self)

        def fields(names):
            return [(self.UC_REGS[n], base + getattr(cls, n).offset, getattr(cls, n).size) for n in names]

        self._proc = proc
        self._read = batch_read(proc.uc, fields(list(self.UC_REGS)))
        # The pc is written on its own, and only when it changed: from inside a hook, Unicorn 2.1
        # keeps a pc only from the one-register call, and a batch write of the pc from a code hook
        # puts the CPU back on the current instruction (which would run again, and again).
        self._write = batch_write(proc.uc, fields([n for n in self.UC_REGS if n != "ip"]))
        return self

    def load(self) -> "RegsView":
        if not self._read():
            raise LabError("Unicorn refused to read the registers")
        self._entry = bytes(self)
        return self

    def flush(self) -> None:
        entry = self._entry
        if bytes(self) == entry:
            return
        if not self._write():
            raise LabError("Unicorn refused to write the registers")
        ip = type(self).ip
        if self.ip != int.from_bytes(entry[ip.offset : ip.offset + ip.size], "little"):
            self._proc.reg_write(self._proc.PC, self.ip)
        self._entry = bytes(self)

    def get(self, name: str) -> int:
        return getattr(self, name)

    def set(self, name: str, value: int) -> None:
        setattr(self, name, value)

    def as_dict(self) -> dict[str, int]:
        return {name: getattr(self, name) for name in self.UC_REGS}

    def __repr__(self) -> str:
        return " ".join(f"{n}={v:#x}" for n, v in self.as_dict().items())


def pt_regs_fields(uc_regs: dict[str, int], narrow: tuple[str, ...] = (),
                   unfilled: dict[str, str] | None = None) -> list[tuple[str, type]]:
    """ctypes ``_fields_`` for a RegsView subclass: a 64-bit field per register, in order, and a
    32-bit one for each name in ``narrow`` (Unicorn fills only 4 bytes of those). ``unfilled`` maps
    a field the kernel's struct has and no Unicorn register fills to the register it follows: it holds
    its place, so every register sits at the kernel's offset (where a BPF program reads it)."""
    fields = []
    for name in uc_regs:
        fields.append((name, ctypes.c_uint32 if name in narrow else ctypes.c_uint64))
        fields += [(extra, ctypes.c_uint64) for extra, after in (unfilled or {}).items() if after == name]
    return fields


class EmulatedProcess:
    """Base class: memory, mappings, run loop, signals. See the arch subclasses."""

    arch = ""  # the architecture's name, as Program.arch and the CLI spell it ("x86_64", "arm64")
    arch_ops: ArchOps  # the hooks the uprobe core calls (set by the arch subclass)
    uc_arch = uc_mode = 0
    Regs = RegsView
    PC = SP = 0  # Unicorn ids of the program counter and stack pointer
    RETVAL = 0  # Unicorn id of the register a call returns its value in
    STEPPER_REGS: tuple[str, ...] = ()  # the pt_regs a Stepper shows by default
    EXEC_IMPLIES_READ = False  # True where page tables cannot express execute-only (x86)
    UC_CPU_MODEL = None  # a Unicorn CPU model (UC_CPU_*) instead of Unicorn's default for the arch
    TASK_STATE: tuple[str, ...] = ("utask",)  # what is each thread's own (uprobe_lab.smp switches it with the registers)
    scheduler = None  # the uprobe_lab.smp.Scheduler while threads run on many CPUs
    cpu = 0  # the CPU the running thread is on
    cpus = 1  # how many CPUs smp.call_on_cpus runs this process's threads on (new_process(cpus=N))

    def __init__(self, kernel: str | KernelVersion | None = None, record: bool = False):
        self._kernel = get_kernel(kernel)
        self.accesses = accesses(self._kernel)  # what this kernel's hits share with other CPUs (uprobe_lab.contended)
        self._running = False  # inside run(): Unicorn is busy
        self._owner = threading.RLock()  # held by the thread calling or running the process
        self._unfinished = False  # the last run stopped before its end (budget, Ctrl-C, an error)
        self.runs = 0  # runs started, abandoned or prepared (a stepper's): how a Stepper sees another call moved it
        self.trace = Trace(record=record)
        close_retired()
        self.uc = Uc(self.uc_arch, self.uc_mode)
        retire_on_collect(self.uc)
        if self.UC_CPU_MODEL is not None:  # only before the first mapping: Unicorn builds the CPU then
            self.uc.ctl_set_cpu_model(self.UC_CPU_MODEL)
        self.mappings: list[Mapping] = []
        self.mm = MmUprobes()
        self.utask = UprobeTask()
        self.dmesg: list[str] = []
        self.signal: str | None = None
        self.signal_reason = ""
        self.program = None
        self.syscalls: dict[int, Callable] = {}  # sys_call_table: number -> handler(proc, regs) -> int
        self.reg_read, self.reg_write = register_access(self.uc)  # reg_read(UC_*_REG_...) -> int
        self._mem_read, self._mem_write = memory_access(self.uc)  # None / False where nothing is mapped
        self._pt_regs = self.Regs().bind(self)

    @property
    def kernel(self) -> KernelVersion:
        """The kernel this process runs on: fixed when the process is made."""
        return self._kernel

    @kernel.setter
    def kernel(self, version) -> None:
        if get_kernel(version) != self._kernel:
            raise LabError(f"a process's kernel is fixed when it is made (its syscall table, [uprobes] trampoline "
                           f"and probe analyses follow {self._kernel}); make a new process instead: "
                           f"new_process(kernel={str(version)!r})")

    def new_task_state(self) -> dict:
        """What of TASK_STATE a new thread does not share with the one that made it (uprobe_lab.smp): its own
        uprobe_task; the arch subclass adds its own."""
        return {"utask": UprobeTask()}

    def kernel_entry(self) -> RegsView:
        """What the entry code does first (arm64's kernel_entry, x86's PUSH_AND_CLEAR_REGS): save
        the user registers into the task's pt_regs, and hand that block to the kernel.

        As with task_pt_regs() it is one block per task, reused by every entry: valid until the
        next one; the exit path's restore is ``flush()``. ``regs()`` gives a block to keep.
        """
        return self._pt_regs.load()

    def regs(self) -> RegsView:
        """The registers as pt_regs, in a block of their own: read them, or change and ``flush()``."""
        return self.Regs().bind(self).load()

    @property
    def pc(self) -> int:
        return self.reg_read(self.PC)

    @property
    def sp(self) -> int:
        return self.reg_read(self.SP)

    # --- memory ---
    def map(self, name: str, start: int, size: int, perms: str = "r-xp", data: bytes = b"",
            dontcopy: bool = False) -> Mapping:
        if start % PAGE_SIZE or size % PAGE_SIZE or size <= 0:
            raise LabError(f"mapping {name!r} must be page aligned: start={start:#x} size={size:#x}")
        for m in self.mappings:
            if start < m.end and m.start < start + size:
                raise LabError(f"mapping {name!r} at {start:#x} overlaps {m.name} {m.start:#x}-{m.end:#x}")
        prot = (UC_PROT_READ if "r" in perms else 0) | (UC_PROT_WRITE if "w" in perms else 0)
        prot |= (UC_PROT_EXEC | (UC_PROT_READ if self.EXEC_IMPLIES_READ else 0)) if "x" in perms else 0
        # Unicorn must be able to write our own bytes in (the kernel writes text through the page
        # cache, not through the user's permissions), so map writable first, then protect.
        self.uc.mem_map(start, size, UC_PROT_READ | UC_PROT_WRITE | UC_PROT_EXEC)
        if data:
            self.uc.mem_write(start, bytes(data))
        self.uc.mem_protect(start, size, prot or UC_PROT_READ)
        mapping = Mapping(start, start + size, perms, name, dontcopy=dontcopy)
        self.mappings.append(mapping)
        self.mappings.sort(key=lambda m: m.start)
        return mapping

    def load(self, program, path: str = "/lab/bench") -> None:
        """Map a Program's text read-execute, named like the file it would come from."""
        if program.arch != self.arch:
            raise LabError(f"program is for {program.arch}, this process is {self.arch}")
        size = -(-len(program.code) // PAGE_SIZE) * PAGE_SIZE
        self.map(path, program.base, size, "r-xp", program.code)
        self.program = program

    def mapping_at(self, addr: int) -> Mapping | None:
        return mapping_at(self.mappings, addr)

    def find_mapping(self, name: str) -> Mapping | None:
        return next((m for m in self.mappings if m.name == name), None)

    def maps(self) -> str:
        """The address space as /proc/PID/maps prints it."""
        return "\n".join(m.line() for m in self.mappings)

    def read_page(self, addr: int, size: int) -> bytes | None:
        """Read as the kernel reads a page it looked up (get_user_pages): None if not mapped, no event."""
        return self._mem_read(addr, size)

    def read(self, addr: int, size: int) -> bytes:
        data = self._mem_read(addr, size)
        if data is None:
            raise LabError(f"address {addr:#x} (+{size}) is not mapped in the emulated process")
        return data

    def write(self, addr: int, data: bytes) -> None:
        """Write as the kernel writes text (through the page, not the user's permissions).

        Unicorn keeps translated blocks of code it already ran; a write into an executable mapping
        drops them, or the CPU would keep running the old bytes (a probe patched in mid-run).
        """
        data = bytes(data)
        mapping = self.mapping_at(addr)
        code = mapping is not None and "x" in mapping.perms
        if not self._mem_write(addr, data):
            raise LabError(f"address {addr:#x} (+{len(data)}) is not mapped in the emulated process")
        if code:
            self.uc.ctl_remove_cache(addr, addr + len(data))

    def read_u64(self, addr: int) -> int:
        return int.from_bytes(self.read(addr, 8), "little")

    def write_u64(self, addr: int, value: int) -> None:
        self.write(addr, (value & MASK64).to_bytes(8, "little"))

    # Kernel accesses to user memory: counted, and failing like copy_{from,to}_user instead of raising.
    def copy_from_user(self, addr: int, size: int) -> bytes | None:
        data = self._mem_read(addr, size)
        if data is not None:
            self.trace.emit("uaccess_copies")
            self.trace.emit("uaccess_bytes", size)
        return data

    def copy_to_user_nleft(self, addr: int, data: bytes) -> int:
        """copy_to_user()'s own answer: how many bytes it could *not* copy. It stops at the first byte
        outside a writable mapping (Unicorn's writes ignore page protections, so the lab checks); the
        bytes before that one are written, as the kernel's are."""
        done = 0
        while done < len(data):
            mapping = self.mapping_at(addr + done)
            if mapping is None or "w" not in mapping.perms:
                break
            done += min(len(data) - done, mapping.end - (addr + done))
        if not done or not self._mem_write(addr, bytes(data[:done])):
            return len(data)
        self.trace.emit("uaccess_copies")
        self.trace.emit("uaccess_bytes", done)
        return len(data) - done

    def copy_to_user(self, addr: int, data: bytes) -> bool:
        """Every byte copied (what most callers ask: ``if (copy_to_user(...)) return -EFAULT``)."""
        return self.copy_to_user_nleft(addr, data) == 0

    # --- syscalls ---
    def set_syscall(self, nr: int, handler: Callable | None) -> Callable | None:
        """Serve syscall ``nr`` with ``handler(proc, regs) -> int`` (None: -ENOSYS); returns the old handler.

        For experiments with another version of a syscall (``optimize.sys_uprobe_sigill``) or a spy
        that calls the old one; the arch's syscall entry looks the number up on every call."""
        if not isinstance(nr, int) or nr < 0:
            raise LabError(f"a syscall number is a non-negative int, got {nr!r} (see the arch's constants, e.g. "
                           "uprobe_lab.x86.constants.__NR_uprobe)")
        if handler is not None and not callable(handler):
            raise LabError(f"a syscall handler is a function (proc, regs) -> int, got {handler!r}")
        old = self.syscalls.get(nr)
        if handler is None:
            self.syscalls.pop(nr, None)
        else:
            self.syscalls[nr] = handler
        return old

    # --- signals ---
    def force_sig(self, sig: str, reason: str = "") -> None:
        """Deliver a fatal signal: the emulated process stops, as with the signal's default action."""
        self.signal = sig
        self.signal_reason = reason
        self.trace.emit("signals", note=f"{sig}: {reason}")
        self.uc.emu_stop()

    # --- running ---
    def exit_to_user_mode(self) -> None:
        """The return to user mode, where the scheduler may switch to another thread (on many CPUs)."""
        if self.scheduler is not None:
            self.scheduler.preempt()

    def arch_fault(self) -> bool:
        """A CPU fault Unicorn gets wrong, put right by the arch's process (x86: a branch to a
        non-canonical address); True if it delivered the signal itself."""
        return False

    def cpu_fault(self, err: UcError, where: str = "") -> None:
        """Unicorn stopped on a fault: the arch's own handling (arch_fault), else SIGSEGV; a fault inside an XOL
        step is reported at the probed address."""
        pc = self.pc
        if not self.arch_fault():
            uprobe_abort_xol(self)
            self.force_sig("SIGSEGV", f"{err} at pc={pc:#x}{where}")

    def run(self, start: int, until: int, max_insns: int = DEFAULT_MAX_INSNS) -> RunResult:
        """Run from ``start`` until the pc reaches ``until``, a signal, or ``max_insns`` instructions.

        A run stopped by its budget can be continued (``run(result.ip, ...)``: how a Stepper steps);
        a run from anywhere else first abandons what the stopped one left pending (``abandon_run``).
        Ctrl-C stops the run at the end of the kernel entry under way, leaves the process usable
        and raises KeyboardInterrupt here. The CPU runs in slices of ``RUN_SLICE`` instructions, so
        Ctrl-C is seen even in code that never enters the kernel model."""
        check_max_insns(max_insns)
        if self.signal:
            raise ProcessKilled(f"the process already died of {self.signal} ({self.signal_reason}); make a new one")
        with self.exclusive():
            return self._run(start, until, max_insns)

    @contextmanager
    def exclusive(self):
        """Hold the process for one call or run, refusing before anything is touched a second one: from
        another thread, or from a consumer, filter or syscall handler inside the run (same thread)."""
        if not self._owner.acquire(blocking=False):
            raise LabError("another thread is calling this process: one process runs one call at a time; give "
                           "each thread a process of its own (new_process), or wait for the call to return")
        try:
            if self._running:
                raise LabError("the process is already running: a consumer, filter or syscall handler cannot call() "
                               "or run() the process it was called from; note what you need in the handler and make "
                               "the call after the outer one returns")
            yield
        finally:
            self._owner.release()

    def _run(self, start: int, until: int, max_insns: int) -> RunResult:
        if self._unfinished and start != self.pc:
            self.abandon_run()
        close_retired()
        self.runs += 1
        left, pc = max_insns, start
        try:  # set inside the try, so a Ctrl-C between the two cannot leave the process marked running
            self._running, self._unfinished = True, True
            with sigint_stops(self.uc.emu_stop) as interrupt:
                while left and not interrupt.pending:
                    count = min(left, RUN_SLICE)
                    try:
                        self.uc.emu_start(pc, until, count=count)
                    except UcError as err:
                        self.cpu_fault(err)
                    pc = self.pc
                    if self.signal or pc == until:
                        break
                    left -= count  # a slice can end early only by a signal, the end, or Ctrl-C
        except BaseException:  # a consumer raised: settle the process, then let the error through
            self.abandon_run()
            raise
        finally:
            self._running = False
        if interrupt.pending:
            self.abandon_run()
            deliver(interrupt)
        if self.signal:
            return RunResult("signal", pc, self.signal, self.signal_reason)
        if pc == until:
            self._unfinished = False
            return RunResult("until", pc)
        return RunResult("count", pc, reason=f"stopped after {max_insns} instructions at {pc:#x}")

    def abandon_run(self) -> None:
        """Settle what a stopped run left half done, so the next call starts clean.

        A pending out-of-line step is aborted the way handle_singlestep() aborts a trapped one
        (kernel/events/uprobes.c; the lab's ``uprobe_abort_xol`` does it): arch_uprobe_abort_xol() puts ip
        back on the probed address and clears the trap flag or MDSCR.SS, then the XOL slot is freed. The return
        instances of the abandoned frames are dropped (a new call starts from the top of the stack,
        where cleanup_return_instances would find every one of them dead)."""
        with sigint_stops(lambda: None) as interrupt:  # Ctrl-C must not leave it half settled
            uprobe_abort_xol(self)
            self.utask.return_instances.clear()
            self._unfinished = False
            self.runs += 1
        if interrupt.pending:
            deliver(interrupt)

    # --- fork ---
    def fork_options(self) -> dict:
        """The constructor's options that made this process (the arch subclass adds its own), for fork."""
        return {"record": self.trace.record}

    def fork(self) -> "EmulatedProcess":
        """A child as fork() makes it: twin of dup_mm() (kernel/fork.c) and dup_mmap() (mm/mmap.c since 6.16).

        Every mapping is copied, byte for byte as it is now (text with its int3s and optimised calls
        included), except those mapped VM_DONTCOPY: ``[uprobes]`` always, and x86's
        ``[uprobes-trampoline]`` before 7.3. The registers are the parent's; ``uprobe_dup_mmap`` gives
        the child the parent's probes. The child has its own trace and starts with no return instances.

        What the lab leaves out: the fork syscall itself (call ``fork()`` between two calls, not from
        inside one, so no return instance is pending and ``uprobe_copy_process`` has nothing to copy),
        copy-on-write (each side gets its own copy at once; a shared mapping is copied too), and the
        kernel's later reach from one process to the other: in the kernel a probe is on the file, so
        registering or removing one reaches every process mapping it; here each keeps its own probes,
        with the same consumer objects, from the fork on.
        """
        if self._running:
            raise LabError("fork() is called between two calls of the process, not from a consumer, filter or "
                           "syscall handler running inside one")
        if self.signal:
            raise ProcessKilled(f"the process died of {self.signal} ({self.signal_reason}): a dead process does not fork")
        if self._unfinished:
            self.abandon_run()
        child = type(self)(self.kernel, **self.fork_options())
        for m in self.mappings:
            if m.dontcopy:
                continue
            data = self.read_page(m.start, m.end - m.start)
            if child.find_mapping(m.name) == m:  # what every new process maps itself ([stack])
                child.write(m.start, data)
            else:
                child.map(m.name, m.start, m.end - m.start, m.perms, data)
        child.program = self.program
        child.syscalls = dict(self.syscalls)
        regs, theirs = self.regs(), child.regs()
        for name, value in regs.as_dict().items():
            theirs.set(name, value)
        theirs.flush()
        uprobe_dup_mmap(self, child)
        return child

    # --- calls, for notebooks and tests ---
    def prepare_call(self, target, *args: int, stack_top: int | None = None) -> tuple[int, int]:
        """Set up a call of ``target`` (a symbol or address) by the arch's calling convention, returning
        to an unmapped exit address, on the stack below ``stack_top`` (None: the [stack]); returns (start, exit address)."""
        raise NotImplementedError

    def call_address(self, target) -> int:
        """The address a call of ``target`` starts at: a symbol of the program, or an address."""
        if isinstance(target, str):
            return self.program.resolve(target)
        if is_int(target) and 0 <= target <= MASK64:
            return target
        raise LabError(f"call a symbol of the program by name ('uprobe_target_nop') or an address (an int), "
                       f"got {target!r}")

    def check_call_args(self, args, registers: int) -> None:
        """Refuse what a register cannot carry: more arguments than argument registers, or a value
        outside 64 bits (negative values are passed in two's complement)."""
        if len(args) > registers:
            raise LabError(f"{self.arch} passes at most {registers} arguments in registers, got {len(args)}; "
                           "the lab's calls take no stack arguments")
        for i, value in enumerate(args):
            if not isinstance(value, int) or not -(1 << 63) <= value <= MASK64:
                raise LabError(f"argument {i} is {value!r}: pass an int that fits 64 bits")

    def call(self, target, *args: int, max_insns: int = DEFAULT_MAX_INSNS) -> int:
        """Call a function with the arch's calling convention and return its return value."""
        with self.exclusive():  # a refused call must not touch the registers of the run under way
            if self._unfinished:
                self.abandon_run()  # before prepare_call: an aborted step may restore a register
            start, until = self.prepare_call(target, *args)
            result = self.run(start, until, max_insns)
            if not result.ok:
                if not result.signal:
                    self.abandon_run()
                raise_for(result)
            return self.reg_read(self.RETVAL)

    def stepper(self, target, *args: int, regs: tuple[str, ...] | None = None) -> Stepper:
        """A Stepper over a call of ``target``, one instruction per step (needs record=True).

        A new stepper abandons whatever an earlier one left half done; the earlier one then refuses to step."""
        with self.exclusive():
            if self._unfinished:
                self.abandon_run()
            start, until = self.prepare_call(target, *args)
            self.runs += 1
        return Stepper(self, start, until, regs or self.STEPPER_REGS)

    def __repr__(self) -> str:
        state = f" killed by {self.signal}" if self.signal else ""
        return f"<{type(self).__name__} kernel {self.kernel} {len(self.mappings)} mappings{state}>"
