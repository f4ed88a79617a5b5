"""The C library, loaded once with the prototypes native mode calls (mmap, munmap, syscall)."""
from __future__ import annotations

import ctypes
import functools


@functools.cache
def libc() -> ctypes.CDLL:  # loaded on first use, so importing native mode works on any OS
    lib = ctypes.CDLL(None, use_errno=True)
    lib.mmap.restype = ctypes.c_void_p
    lib.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    lib.munmap.restype = ctypes.c_int
    lib.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    lib.syscall.restype = ctypes.c_long
    return lib
