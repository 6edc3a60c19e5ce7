# The integer attention's kernels for Armv7-M cores and up (the Cortex-M3, the DSP cores: M4, M7, the RP2350's M33,
# M55), where Thumb-2's hardware divide exists: kernels.asm_thumb takes this module's att_div_q10 in place of its
# own Thumb-1 one (restoring division one bit a step: 40 steps of 7 instructions a dimension) where the module
# loads, which is only where kvedge.kernels.cpuid.has_thumb2() says the core runs Thumb-2 (an Armv6-M core, the
# RP2040's M0+, would fault on them); deploy sends it to armv7m boards and up. Raw encodings in data(2, hw1, hw2)
# (MicroPython's inline assembler has no mnemonic for them in an armv6m build):
#   UDIV Rd, Rn, Rm       0xFBB0 | Rn, 0xF0F0 | Rd << 8 | Rm        (Rd = Rn / Rm, unsigned, truncated)
#   MLS Rd, Rn, Rm, Ra    0xFB00 | Rn, Ra << 12 | Rd << 8 | 0x10 | Rm  (Rd = Ra - Rn * Rm)
# Same integers as kernels.plain.att_div_q10 (tests/device/test_att_v7m.py).
import micropython
from kvedge.kernels.cpuid import has_thumb2

if not has_thumb2():  # before anything is defined: on another core the module is not kept
    raise ImportError("no Thumb-2 instructions on this core (kvedge.kernels.cpuid)")

OK = True


@micropython.asm_thumb
def att_div_q10(r0, r1, r2):
    # r0 acc, r1 out, r2 tile: out[QOFF + i] = acc[i] * 2**10 / LSUM, truncated toward zero, acc[i] = 0. The
    # quotient |a| / l by UDIV and its remainder by MLS, then the ten fraction bits three, three, three and one at a
    # time: the remainder stays below l <= 2**28, so r << 3 fits 32 bits; the quotient's bits shift in as the
    # Thumb-1 kernel's do (the same low 32 bits).
    ldr(r3, [r2, 4])  # D
    ldr(r4, [r2, 8])  # QOFF
    lsl(r4, r4, 2)
    add(r1, r1, r4)
    ldr(r2, [r2, 48])  # LSUM
    label(DIM)
    ldr(r4, [r0, 0])
    mov(r5, 0)
    str(r5, [r0, 0])
    cmp(r4, 0)
    bge(POS)
    neg(r4, r4)
    mov(r5, 1)
    label(POS)
    data(2, 0xFBB4, 0xF6F2)  # udiv r6, r4, r2: q
    data(2, 0xFB06, 0x4412)  # mls r4, r6, r2, r4: r = a - q l
    lsl(r4, r4, 3)
    data(2, 0xFBB4, 0xF7F2)  # udiv r7, r4, r2
    data(2, 0xFB07, 0x4412)  # mls r4, r7, r2, r4
    lsl(r6, r6, 3)
    orr(r6, r7)
    lsl(r4, r4, 3)
    data(2, 0xFBB4, 0xF7F2)  # udiv r7, r4, r2
    data(2, 0xFB07, 0x4412)  # mls r4, r7, r2, r4
    lsl(r6, r6, 3)
    orr(r6, r7)
    lsl(r4, r4, 3)
    data(2, 0xFBB4, 0xF7F2)  # udiv r7, r4, r2
    data(2, 0xFB07, 0x4412)  # mls r4, r7, r2, r4
    lsl(r6, r6, 3)
    orr(r6, r7)
    lsl(r4, r4, 1)
    data(2, 0xFBB4, 0xF7F2)  # udiv r7, r4, r2: the last bit
    lsl(r6, r6, 1)
    orr(r6, r7)
    cmp(r5, 0)
    beq(STORE)
    neg(r6, r6)
    label(STORE)
    str(r6, [r1, 0])
    add(r0, 4)
    add(r1, 4)
    sub(r3, 1)
    bne(DIM)
    mov(r0, 0)
