"""Unicorn's C library called directly, for the emulator's hottest calls, and the engines' closing.

This is the one module that reaches into the binding (unicorn 2.1: its library handle ``uclib``, an engine's
``_uch`` and its ``_Uc__finalizer``). Unicorn's own methods convert every argument on each call (~0.5 us);
the same C functions without argtypes, given ready-made ctypes arguments, cost half that, and one batch call
moves all of pt_regs for little more than one register. Where the binding lacks those internals (another
release), ``DIRECT`` is False and every function here falls back on the binding's public methods: slower,
the same answers.
"""
from __future__ import annotations

import ctypes

from unicorn import Uc, UcError

from .constants import MASK64

try:
    from unicorn.unicorn_py3.unicorn import uclib
    _lib = ctypes.CDLL(uclib._name)
except (ImportError, AttributeError, OSError):  # another binding: the public methods only
    uclib = _lib = None
DIRECT = _lib is not None


class _RegIds(dict):
    def __missing__(self, reg_id: int) -> ctypes.c_int:
        self[reg_id] = value = ctypes.c_int(reg_id)
        return value


_REG_IDS = _RegIds()


def _handle(uc: Uc) -> ctypes.c_void_p:
    return ctypes.c_void_p(uc._uch.value)


def register_access(uc: Uc):
    """(read(reg_id) -> int, write(reg_id, value)) for an engine, at the cost of one C call each."""
    if not DIRECT:
        return uc.reg_read, lambda reg_id, value: uc.reg_write(reg_id, value & MASK64)
    handle, cell, ids = _handle(uc), ctypes.c_uint64(), _REG_IDS
    ref, c_read, c_write = ctypes.byref(cell), _lib.uc_reg_read, _lib.uc_reg_write

    def read(reg_id: int) -> int:
        cell.value = 0  # a 32-bit register (arm64 NZCV) fills only the low half
        c_read(handle, ids[reg_id], ref)
        return cell.value

    def write(reg_id: int, value: int) -> None:
        cell.value = value & MASK64
        c_write(handle, ids[reg_id], ref)

    return read, write


def memory_access(uc: Uc):
    """(read(addr, size) -> bytes or None if unmapped, write(addr, data) -> False if unmapped) for an engine."""
    if not DIRECT:
        def read(addr: int, size: int) -> bytes | None:
            try:
                return bytes(uc.mem_read(addr, size))
            except UcError:
                return None

        def write(addr: int, data: bytes) -> bool:
            try:
                uc.mem_write(addr, data)
            except UcError:
                return False
            return True

        return read, write
    handle, c_read, c_write = _handle(uc), _lib.uc_mem_read, _lib.uc_mem_write

    def read(addr: int, size: int) -> bytes | None:
        buf = ctypes.create_string_buffer(size)
        if c_read(handle, ctypes.c_uint64(addr), buf, ctypes.c_size_t(size)):
            return None
        return buf.raw

    def write(addr: int, data: bytes) -> bool:
        return not c_write(handle, ctypes.c_uint64(addr), data, ctypes.c_size_t(len(data)))

    return read, write


def batch_read(uc: Uc, fields: list[tuple[int, int, int]]):
    """A call that reads these registers into memory at once (True when it worked): ``fields`` are (Unicorn
    register id, address of its cell, cell size in bytes)."""
    return _batch(uc, fields, write=False)


def batch_write(uc: Uc, fields: list[tuple[int, int, int]]):
    """A call that writes these registers from their cells at once (True when it worked)."""
    return _batch(uc, fields, write=True)


def _batch(uc: Uc, fields, write: bool):
    if not DIRECT:
        cells = [((ctypes.c_uint32 if size == 4 else ctypes.c_uint64).from_address(addr), reg_id)
                 for reg_id, addr, size in fields]

        def one_by_one() -> bool:
            for cell, reg_id in cells:
                if write:
                    uc.reg_write(reg_id, cell.value)
                else:
                    cell.value = uc.reg_read(reg_id)
            return True

        return one_by_one
    n = len(fields)
    args = (_handle(uc), (ctypes.c_int * n)(*(f[0] for f in fields)), (ctypes.c_void_p * n)(*(f[1] for f in fields)),
            ctypes.c_int(n))
    call = _lib.uc_reg_write_batch if write else _lib.uc_reg_read_batch
    return lambda: not call(*args)  # the C call returns 0 on success


def detach_finalizer(uc: Uc):
    """Take the binding's own finalizer off ``uc`` and return the engine's handle for :func:`close_engine`,
    or None where the binding has no such finalizer (it then closes the engine itself)."""
    own = getattr(uc, "_Uc__finalizer", None)
    if not DIRECT or own is None or own.detach() is None:
        return None
    return uc._uch


def close_engine(handle) -> None:
    _lib.uc_close(handle)
