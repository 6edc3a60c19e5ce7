# The integer forward pass's matrix-vector product for cores with Armv7E-M's DSP instructions (the RP2350's
# Cortex-M33, M4, M7, M55): kvedge.kernels.q8_asm_thumb takes this module's q_quant and q_mv in place of its own where
# the module loads, which is only where kvedge.kernels.cpuid.has_dsp() finds the instructions in the core's ID registers
# (on an M0+ or M3 they are undefined instructions: a HardFault). deploy sends it only to armv7em, armv7emsp and
# armv7emdp boards, compiled as their .mpy (mpy-cross -march=armv7emsp for the RP2350). MicroPython's inline
# assembler has no DSP mnemonics; each is its Thumb-2 encoding in data(2, hw1, hw2):
#   SXTB16 Rd, Rm, ROR #r   0xFA2F, 0xF080 | Rd << 8 | (r / 8) << 4 | Rm  (bytes 0 and 2 of Rm ror r, sign-extended)
#   SMLAD Rd, Rn, Rm, Ra    0xFB20 | Rn, Ra << 12 | Rd << 8 | Rm          (Rd = Ra + lo(Rn) lo(Rm) + hi(Rn) hi(Rm))
# The matrix-vector product takes four int8 weights a word (two SXTB16) against the matvec input
# packed as signed 16-bit pairs by this module's q_quant: two SMLADs per four multiply-accumulates. The
# input's format is private to this module (q_quant writes it, q_mv reads it; nothing else reads xq):
#   word 0: unused (0), word 1: n, then per group of four codes
#   (c0, c2), (c1, c3) as 16-bit pairs, then the n % 4 last codes as 16-bit values: 8 + 2n bytes of the 4n
#   of xq. Same integers as kernels.q8_plain (tested bit-identical on the emulated Cortex-M7 and M55).
import micropython
from kvedge.kernels.cpuid import has_dsp

if not has_dsp():  # before anything is defined: on another core the module is not kept
    raise ImportError("no DSP instructions on this core (kvedge.kernels.cpuid)")

@micropython.viper
def q_quant(z: ptr32, codes, n: int, p: ptr32) -> int:  # noqa: F821
    """kernels.q8_viper.q_quant's codes, packed for q_mv (the layout above)."""
    hw = ptr16(codes)  # noqa: F821
    wd = ptr32(codes)  # noqa: F821
    sb = 1
    sb <<= 31
    s = (p[0] ^ sb) - sb
    R = p[1]
    K = p[2]
    C = p[3]
    half = 1 << (K - 1)
    n4 = n & (0 - 4)
    i = 0
    while i < n:
        v = (z[i] ^ sb) - sb
        neg = v < 0
        if neg:
            v = 0 - v
        if s >= 0:
            v = v >> s
        else:
            v = v << (0 - s)
        c = (v * R + half) >> K
        if c > C:
            c = C
        if neg:
            c = 0 - c
        if i < n4:
            r = i & 3
            hw[4 + (i - r) + ((r & 1) << 1) + (r >> 1)] = c
        else:
            hw[4 + i] = c
        i += 1
    wd[0] = 0
    wd[1] = n
    return 0


@micropython.asm_thumb
def q_mv(r0, r1, r2, r3):
    # r0 w (int8 rows), r1 x (packed by q_quant), r2 out (int32), r3 p (parameter block, P_* of
    # kernels.q8_plain); kept in high registers: r8 p, r9 the out pointer, r10 x's pairs, r11 rows left, r12 the
    # row word pointer; r7 the largest |out| written (the return value)
    mov(r4, r8)
    mov(r5, r9)
    mov(r6, r10)
    mov(r7, r11)
    push({r4, r5, r6, r7})
    mov(r4, r12)
    push({r4})
    mov(r8, r3)
    add(r1, 8)
    mov(r10, r1)
    ldr(r4, [r3, 0])  # wo
    add(r0, r0, r4)
    ldr(r4, [r3, 24])  # ro
    lsl(r4, r4, 2)
    add(r5, r2, r4)
    mov(r9, r5)  # out + ro
    add(r4, r4, r3)
    add(r4, 32)
    mov(r12, r4)  # p + 4 * (P_HDR + ro): the first row's word
    ldr(r4, [r3, 4])
    mov(r11, r4)  # rows
    mov(r7, 0)
    label(ROW)
    mov(r4, r11)
    cmp(r4, 0)
    bne(ROWGO)
    b(END)
    label(ROWGO)
    sub(r4, 1)
    mov(r11, r4)
    mov(r1, r10)
    mov(r2, 0)
    mov(r4, r8)
    ldr(r3, [r4, 8])  # cols
    lsr(r6, r3, 5)  # 32 products at a time: 8 x (ldr, 2 uxtb16, 2 ldr, 2 smlad)
    beq(C4)
    label(L32)
    ldr(r4, [r0, 0])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 0])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 4])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    ldr(r4, [r0, 4])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 8])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 12])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    ldr(r4, [r0, 8])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 16])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 20])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    ldr(r4, [r0, 12])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 24])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 28])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    ldr(r4, [r0, 16])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 32])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 36])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    ldr(r4, [r0, 20])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 40])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 44])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    ldr(r4, [r0, 24])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 48])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 52])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    ldr(r4, [r0, 28])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 56])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 60])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    add(r0, 32)
    add(r1, 64)
    sub(r6, 1)
    bne(L32)
    label(C4)
    mov(r4, r8)
    ldr(r3, [r4, 8])
    lsl(r6, r3, 27)
    lsr(r6, r6, 29)  # (cols & 31) >> 2: groups of four left
    beq(C1)
    label(L4)
    ldr(r4, [r0, 0])
    data(2, 0xFA2F, 0xF584)  # sxtb16 r5, r4: rows' bytes 0 and 2
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8: bytes 1 and 3
    ldr(r3, [r1, 0])
    data(2, 0xFB25, 0x2203)  # smlad r2, r5, r3, r2
    ldr(r3, [r1, 4])
    data(2, 0xFB24, 0x2203)  # smlad r2, r4, r3, r2
    add(r0, 4)
    add(r1, 8)
    sub(r6, 1)
    bne(L4)
    label(C1)
    mov(r4, r8)
    ldr(r3, [r4, 8])
    mov(r6, 3)
    and_(r6, r3)  # cols & 3: single codes, 16 bits each
    beq(DQ)
    label(L1)
    ldrb(r4, [r0, 0])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldrh(r5, [r1, 0])
    lsl(r5, r5, 16)
    asr(r5, r5, 16)
    mul(r4, r5)
    add(r2, r2, r4)
    add(r0, 1)
    add(r1, 2)
    sub(r6, 1)
    bne(L1)
    label(DQ)
    mov(r5, r12)
    ldr(r6, [r5, 0])  # the row's word: mantissa << 8 | shift
    add(r5, 4)
    mov(r12, r5)
    lsr(r3, r6, 8)
    asr(r4, r2, 15)
    mul(r4, r3)
    lsl(r5, r2, 17)
    lsr(r5, r5, 17)
    mul(r5, r3)
    lsr(r5, r5, 15)
    add(r2, r4, r5)
    mov(r4, r8)
    ldr(r3, [r4, 12])  # xm
    asr(r4, r2, 15)
    mul(r4, r3)
    lsl(r5, r2, 17)
    lsr(r5, r5, 17)
    mul(r5, r3)
    lsr(r5, r5, 15)
    add(r2, r4, r5)
    lsl(r6, r6, 24)
    lsr(r6, r6, 24)
    mov(r4, r8)
    ldr(r4, [r4, 16])  # os
    add(r6, r6, r4)  # k = shift + os
    bmi(LEFT)
    cmp(r6, 31)
    ble(RIGHT)
    mov(r6, 31)
    label(RIGHT)
    asr(r2, r6)
    b(CLAMP)
    label(LEFT)  # a left shift by n = -k, saturating at +-VMAX
    neg(r6, r6)
    cmp(r6, 30)
    bge(SATZ)
    mov(r4, 1)
    lsl(r4, r4, 29)
    sub(r4, 1)
    asr(r4, r6)  # VMAX >> n
    cmp(r2, r4)
    bgt(SATP)
    neg(r5, r4)
    cmp(r2, r5)
    blt(SATN)
    lsl(r2, r6)
    b(CLAMP)
    label(SATZ)
    cmp(r2, 0)
    bgt(SATP)
    blt(SATN)
    b(CLAMP)
    label(SATP)
    mov(r2, 1)
    lsl(r2, r2, 29)
    sub(r2, 1)
    b(CLAMP)
    label(SATN)
    mov(r2, 1)
    lsl(r2, r2, 29)
    sub(r2, 1)
    neg(r2, r2)
    label(CLAMP)
    mov(r4, r8)
    ldr(r4, [r4, 20])  # add into out (the residual connection)?
    cmp(r4, 0)
    beq(CL2)
    mov(r4, r9)
    ldr(r4, [r4, 0])
    add(r2, r2, r4)
    label(CL2)
    mov(r4, 1)
    lsl(r4, r4, 29)
    sub(r4, 1)
    cmp(r2, r4)
    ble(CL3)
    mov(r2, r4)
    label(CL3)
    neg(r5, r4)
    cmp(r2, r5)
    bge(CL4)
    mov(r2, r5)
    label(CL4)
    mov(r4, r9)
    str(r2, [r4, 0])
    add(r4, 4)
    mov(r9, r4)
    cmp(r2, 0)
    bge(ABS)
    neg(r2, r2)
    label(ABS)
    cmp(r2, r7)
    ble(ROWEND)
    mov(r7, r2)
    label(ROWEND)
    b(ROW)
    label(END)
    mov(r0, r7)
    pop({r4})
    mov(r12, r4)
    pop({r4, r5, r6, r7})
    mov(r8, r4)
    mov(r9, r5)
    mov(r10, r6)
    mov(r11, r7)
