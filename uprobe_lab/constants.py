"""Constants every layer shares (a leaf module: it imports nothing from the lab).

Per-architecture constants (the breakpoint instruction, TASK_SIZE, syscall numbers, the lab's stack
and call-exit addresses) live in each arch's own ``constants`` module.
"""
PAGE_SIZE = 0x1000
MASK64 = (1 << 64) - 1
MAX_ITERATIONS = 1 << 64  # a bench's producer loop counts its calls in one 64-bit register
