"""arm64 constants: the values the kernel keeps in arch/arm64/include/asm/{uprobes.h,processor.h}
and include/uapi/asm-generic/unistd.h, and the lab's address-space layout.

A leaf module: it imports nothing from the lab.
"""
AARCH64_INSN_SIZE = 4
UPROBE_SWBP_INSN_SIZE = AARCH64_INSN_SIZE
UPROBE_XOL_SLOT_BYTES = AARCH64_INSN_SIZE
MAX_UINSN_BYTES = AARCH64_INSN_SIZE

ENOSYS = 38

# TASK_SIZE_64 with 48-bit virtual addresses (VA_BITS=48): the XOL page goes just below it
TASK_SIZE = 1 << 48

# include/uapi/asm-generic/unistd.h
__NR_getpgid = 155

# The lab's layout of an emulated process
STACK_TOP = 0x7FFFFFFDE000
STACK_SIZE = 0x21000
EXIT_ADDR = 0x7FFFF7FF0000  # unmapped: returning here ends a call() (Unicorn stops before fetching)
