"""x86-64 constants: the values the kernel keeps in arch/x86/include/asm/{uprobes.h,processor-flags.h,
page_64_types.h} and arch/x86/entry/syscalls/syscall_64.tbl, and the lab's address-space layout.

A leaf module (it imports nothing from the lab), so decode, emulation, trampolines and the
process can all use it without importing each other.
"""
# asm/uprobes.h
UPROBE_SWBP_INSN = 0xCC  # int3
UPROBE_SWBP_INSN_SIZE = 1
UPROBE_XOL_SLOT_BYTES = 128
MAX_UINSN_BYTES = 16

# asm/processor-flags.h
X86_EFLAGS_TF = 0x100
X86_EFLAGS_IF = 0x200
X86_EFLAGS_RF = 0x10000

# errno (include/uapi/asm-generic/errno{-base}.h)
ENXIO = 6  # sys_uprobe off the trampoline, 6.18
EFAULT = 14
EINVAL = 22
ENOSYS = 38
EPROTO = 71  # sys_uprobe off the trampoline, 7.3

# asm/page_64_types.h, 4-level paging: the top of user space; the XOL page goes just below it
TASK_SIZE = 0x7FFFFFFFF000
CANONICAL_BITS = 48  # 4-level paging: an address is canonical when bits 63..47 are equal

# syscall_64.tbl
__NR_getpgid = 121
__NR_futex = 202
FUTEX_WAKE, FUTEX_PRIVATE_FLAG = 1, 128  # include/uapi/linux/futex.h
__NR_uretprobe = 335  # v1 of the patch used 462, see URETPROBE_SYSCALL_HISTORY
__NR_uprobe = 336  # 6.18 and 7.3

URETPROBE_SYSCALL_HISTORY = [
    (462, "v1 on the list (seed 002)"),
    (463, "190fec72df4a 'uprobe: Wire up uretprobe system call' ('64' abi)"),
    (467, "63ded110979b 'uprobe: Change uretprobe syscall scope and number' (common)"),
    (335, "54233a425403 'uretprobe: change syscall number, again' - released in 6.11"),
]

# The lab's layout of an emulated process
STACK_TOP = 0x7FFFFFFDE000  # below [uprobes], which the kernel maps as high as it can
STACK_SIZE = 0x21000
EXIT_ADDR = 0x7FFFF7FF0000  # unmapped: returning here ends a call() (Unicorn stops before fetching)
SYSCALL_INSN_SIZE = 2
