# What the core is, read from its own ID registers (never assumed from the firmware's .mpy arch: the emulated
# Cortex-M3's firmware reports armv7em). Imported only by kvedge.kernels.q8_dsp_thumb and q8_v7m_thumb, so a run that
# cannot use their kernels never loads it.
from kvedge.kernels import arch


def has_dsp():
    """Whether this core has Armv7E-M's DSP instructions (SMLAD, UXTB16: the Cortex-M4, M7, the RP2350's M33 and
    the M55, not the M0+ or M3): an Armv7-M or v8-M core (CPUID architecture 0xF) whose ID_ISAR3 SIMD field is
    3 or more. Read only on Arm builds from armv7m up (those addresses elsewhere would fault); False where the
    port has no machine.mem32."""
    if not 5 <= arch() <= 8:  # armv7m .. armv7emdp
        return False
    try:
        from machine import mem32
    except ImportError:
        return False
    if (mem32[0xE000ED00] >> 16) & 15 != 15:  # CPUID: Armv7-M / Armv8-M (Armv6-M reads 0xC)
        return False
    return (mem32[0xE000ED6C] >> 4) & 15 >= 3  # ID_ISAR3.SIMD_instrs


def has_thumb2():
    """Whether this core runs Thumb-2 (Armv7-M and v8-M Mainline: the M3, M4, M7, M33, M55; not the M0+): a
    firmware built for armv7m or later (its own code is Thumb-2, which an Armv6-M core cannot run), confirmed by
    CPUID's architecture field where the port has machine.mem32."""
    if not 5 <= arch() <= 8:
        return False
    try:
        from machine import mem32
    except ImportError:
        return True
    return (mem32[0xE000ED00] >> 16) & 15 == 15
