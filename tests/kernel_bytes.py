"""Trampoline bytes as the merged kernel writes them (arch/x86/kernel/uprobes.c, 6.18), spelled out by hand
from its assembly, so the emulator, the host's pages and the recordings are all checked against one copy."""

# uretprobe_trampoline: push %rax; push %rcx; push %r11; mov $__NR_uretprobe (335), %rax; syscall;
# pop %r11; pop %rcx; ret; int3 (the int3 after ret since 354492a0e1bc, 6.18)
URETPROBE_TRAMPOLINE = bytes.fromhex("50 51 4153 48c7c04f010000 0f05 415b 59 c3 cc")

# uprobe_trampoline (the optimised nop5's [uprobes-trampoline]): push %rcx; push %r11; push %rax;
# mov $__NR_uprobe (336), %rax; syscall; pop %rax; pop %r11; pop %rcx; ret; int3
UPROBE_TRAMPOLINE = bytes.fromhex("51 4153 50 48c7c050010000 0f05 58 415b 59 c3 cc")
