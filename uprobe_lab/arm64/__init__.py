"""The arm64 half of the lab: an emulated AArch64 process and the twin of arch/arm64/kernel/probes/."""
