# The integer forward pass's small steps in Thumb-2, for Armv7-M cores and up (the Cortex-M3, the DSP cores: M4, M7,
# the RP2350's M33, M55): kvedge.kernels.q8_asm_thumb takes them in place of kernels.q8_viper's where this module
# loads, which is only where kvedge.kernels.cpuid.has_thumb2() says the core runs Thumb-2 (an Armv6-M core, the
# RP2040's M0+, would fault on them); deploy sends it to armv7m boards and up. Same integers as kernels.q8_plain
# (tests/device/test_q8_steps_v7m.py). Raw encodings in data(2, ...) (MicroPython's inline assembler has no mnemonic
# for them in an armv6m build); each line's comment names the instruction, as the ARMv7-M Architecture Reference
# Manual (section A7.7) encodes it. r8-r12 and lr are saved by PUSH.W and restored by POP.W.
import micropython
from kvedge.kernels.cpuid import has_thumb2

if not has_thumb2():  # before anything is defined: on another core the module is not kept
    raise ImportError("no Thumb-2 instructions on this core (kvedge.kernels.cpuid)")

OK = True


@micropython.asm_thumb
def q_swiglu(r0, r1, r2, r3):
    # r0 h (2n values: a then b), r1 tab (the sigmoid's Q15 table), r2 n, r3 p: kernels.q8_plain.q_swiglu. s =
    # max(0, bitlen(p[0]) - 15) by CLZ (back into p[0]), ks = p[1] + s; per value a = h[i] >> s, b = h[n + i] >> s,
    # t by ks's sign (two loops: ks >= 0 shifts left within +-lk, lk = lim >> ks, else saturates; ks < 0 shifts
    # right, then clamps to [-lim, lim - 1]), the table's two points at (t >> 8) + 192 (LDRH), y interpolated by
    # (t & 255) >> 8, h[i] = ((a * y) >> 15) * b; returns max |h[0:n]|. r3 s, r4 4n, r5 a, r6 b, r7 t, r8 ks (or
    # min(-ks, 31)), r9 lk, r10 -lk, r11 the largest |v|, r12 and lr the table's words; sp + 0: -lim.
    data(2, 0xE92D, 0x5F00)  # push.w {r8, r9, r10, r11, r12, lr}
    data(2, 0xB082)  # sub sp, #8
    ldr(r4, [r3, 0])  # B = max |h|
    data(2, 0xFAB4, 0xF584)  # clz r5, r4
    mov(r6, 17)
    sub(r5, r6, r5)  # s = bitlen(B) - 15
    bge(SPOS)
    mov(r5, 0)
    label(SPOS)
    str(r5, [r3, 0])
    ldr(r6, [r3, 4])
    add(r6, r6, r5)  # ks = p[1] + s
    mov(r3, r5)  # s
    data(2, 0xF24C, 0x0700)  # movw r7, #49152
    neg(r7, r7)
    data(2, 0x9700)  # str r7, [sp, #0]: -lim
    lsl(r4, r2, 2)  # from a to b: 4n bytes
    data(2, 0xF240, 0x1780)  # movw r7, #384
    add(r1, r1, r7)
    mov(r7, 0)
    mov(r11, r7)  # the largest |v|
    cmp(r2, 0)
    beq(END)
    cmp(r6, 0)
    blt(KNEG)
    mov(r8, r6)
    data(2, 0xF386, 0x0705)  # usat r7, #5, r6
    data(2, 0xF24C, 0x0500)  # movw r5, #49152
    data(2, 0xFA25, 0xF507)  # lsr.w r5, r5, r7: lk = lim >> ks (0 from ks = 16 on)
    mov(r9, r5)
    neg(r5, r5)
    mov(r10, r5)
    label(LOOPP)
    ldr(r5, [r0, 0])
    data(2, 0x5906)  # ldr r6, [r0, r4]
    asr(r5, r3)  # a
    asr(r6, r3)  # b
    data(2, 0x454D)  # cmp r5, r9
    bge(OUTP)
    data(2, 0x4555)  # cmp r5, r10
    ble(OUTP)
    data(2, 0xFA05, 0xF708)  # lsl.w r7, r5, r8: t
    label(TP)
    data(2, 0xEA4F, 0x2C27)  # asr.w r12, r7, #8
    data(2, 0xEB01, 0x0E4C)  # add.w lr, r1, r12, lsl #1: the table at t >> 8 (r1: tab + 2 * 192)
    data(2, 0xF8BE, 0xC000)  # ldrh.w r12, [lr, #0]
    data(2, 0xF8BE, 0xE002)  # ldrh.w lr, [lr, #2]
    data(2, 0xEBAE, 0x0E0C)  # sub.w lr, lr, r12, lsl #0
    data(2, 0xB2FF)  # uxtb r7, r7
    data(2, 0xFB0E, 0xFE07)  # mul.w lr, lr, r7
    data(2, 0xEB0C, 0x2C2E)  # add.w r12, r12, lr, asr #8: y, interpolated
    data(2, 0xFB05, 0xF50C)  # mul.w r5, r5, r12
    asr(r5, r5, 15)
    mul(r5, r6)  # v = ((a * y) >> 15) * b
    data(2, 0xF840, 0x5B04)  # str.w r5, [r0], #4
    data(2, 0xEA85, 0x76E5)  # eor.w r6, r5, r5, asr #31
    data(2, 0xEBA6, 0x76E5)  # sub.w r6, r6, r5, asr #31: |v|
    data(2, 0x455E)  # cmp r6, r11
    data(2, 0xBFC8)  # it gt
    data(2, 0x46B3)  # mov r11, r6
    sub(r2, 1)
    bne(LOOPP)
    b(END)
    label(OUTP)
    cmp(r5, 0)
    ble(NEGP)
    data(2, 0xF64B, 0x77FF)  # movw r7, #49151
    b(TP)
    label(NEGP)
    data(2, 0x9F00)  # ldr r7, [sp, #0]
    b(TP)
    label(KNEG)
    neg(r6, r6)
    data(2, 0xF386, 0x0705)  # usat r7, #5, r6
    mov(r8, r7)
    label(LOOPN)
    ldr(r5, [r0, 0])
    data(2, 0x5906)  # ldr r6, [r0, r4]
    asr(r5, r3)  # a
    asr(r6, r3)  # b
    data(2, 0xFA45, 0xF708)  # asr.w r7, r5, r8: t
    data(2, 0xF5B7, 0x4F40)  # cmp.w r7, #0xC000
    data(2, 0xBFA8)  # it ge
    data(2, 0xF64B, 0x77FF)  # movw r7, #49151
    data(2, 0xF517, 0x4F40)  # cmn.w r7, #0xC000
    bge(TN)
    data(2, 0x9F00)  # ldr r7, [sp, #0]
    label(TN)
    data(2, 0xEA4F, 0x2C27)  # asr.w r12, r7, #8
    data(2, 0xEB01, 0x0E4C)  # add.w lr, r1, r12, lsl #1: the table at t >> 8 (r1: tab + 2 * 192)
    data(2, 0xF8BE, 0xC000)  # ldrh.w r12, [lr, #0]
    data(2, 0xF8BE, 0xE002)  # ldrh.w lr, [lr, #2]
    data(2, 0xEBAE, 0x0E0C)  # sub.w lr, lr, r12, lsl #0
    data(2, 0xB2FF)  # uxtb r7, r7
    data(2, 0xFB0E, 0xFE07)  # mul.w lr, lr, r7
    data(2, 0xEB0C, 0x2C2E)  # add.w r12, r12, lr, asr #8: y, interpolated
    data(2, 0xFB05, 0xF50C)  # mul.w r5, r5, r12
    asr(r5, r5, 15)
    mul(r5, r6)  # v = ((a * y) >> 15) * b
    data(2, 0xF840, 0x5B04)  # str.w r5, [r0], #4
    data(2, 0xEA85, 0x76E5)  # eor.w r6, r5, r5, asr #31
    data(2, 0xEBA6, 0x76E5)  # sub.w r6, r6, r5, asr #31: |v|
    data(2, 0x455E)  # cmp r6, r11
    data(2, 0xBFC8)  # it gt
    data(2, 0x46B3)  # mov r11, r6
    sub(r2, 1)
    bne(LOOPN)
    b(END)
    label(END)
    mov(r0, r11)
    data(2, 0xB002)  # add sp, #8
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}


@micropython.asm_thumb
def q_heads(r0, r1, r2, r3):
    # r0 v (int32 values), r1 codes (int8), r2 sc (f16 bits), r3 p: kernels.q8_plain.q_heads. Per segment of hd
    # values: amax (one pass), b = bitlen(amax) by CLZ, sh = b - 15, the mantissa M by UDIV, the f16 exponent E and
    # its three cases (beyond the range, normal, subnormal: bits, Mq, G), RM = 2**21 // Mq by UDIV; then per value
    # |v| >> max(sh, 0) << max(-sh, 0) << max(G, 0) >> min(max(-G, 0), 31) (the four amounts by USAT), times RM,
    # rounded at bit 21, at most 127 (USAT), the sign back by its mask. r8 segments left, r9 hd, r10 e; in the
    # values' pass r5 RM, r7, r11, r12 and lr the shifts.
    data(2, 0xE92D, 0x5F00)  # push.w {r8, r9, r10, r11, r12, lr}
    ldr(r4, [r3, 4])
    mov(r9, r4)  # hd
    ldr(r4, [r3, 8])
    mov(r10, r4)  # e
    ldr(r4, [r3, 0])
    mov(r8, r4)  # segments left
    cmp(r4, 0)
    bne(HEAD)
    b(END)
    label(HEAD)
    mov(r3, r0)
    mov(r4, r9)
    mov(r5, 0)  # amax
    cmp(r4, 0)
    beq(P1X)
    label(P1)
    data(2, 0xF853, 0x6B04)  # ldr.w r6, [r3], #4
    data(2, 0xEA86, 0x77E6)  # eor.w r7, r6, r6, asr #31
    data(2, 0xEBA7, 0x77E6)  # sub.w r7, r7, r6, asr #31
    cmp(r7, r5)
    data(2, 0xBFC8)  # it gt
    data(2, 0x463D)  # mov r5, r7
    sub(r4, 1)
    bne(P1)
    label(P1X)
    data(2, 0xFAB5, 0xF685)  # clz r6, r5
    mov(r7, 32)
    sub(r6, r7, r6)  # b = bitlen(amax)
    mov(r7, r6)
    sub(r7, 15)  # sh = b - 15
    ble(SHNP)
    sub(r4, r5, 1)
    lsr(r4, r7)
    add(r4, 1)  # an = ((amax - 1) >> sh) + 1
    b(AND)
    label(SHNP)
    neg(r4, r7)
    mov(r3, r5)
    lsl(r3, r4)
    mov(r4, r3)  # an = amax << -sh
    label(AND)
    data(2, 0xF647, 0x6CF0)  # movw r12, #32496
    mov(r3, 2)
    data(2, 0x4564)  # cmp r4, r12
    bgt(S2)
    mov(r3, 3)  # S = 3 where an * 8 <= 2047 * 127
    label(S2)
    lsl(r4, r3)
    add(r4, 126)
    mov(r12, r3)
    mov(r3, 127)
    data(2, 0xFBB4, 0xF4F3)  # udiv r4, r4, r3: M = (an * 2**S + 126) // 127
    mov(r3, r12)  # S
    data(2, 0xEB06, 0x060A)  # add.w r6, r6, r10, lsl #0: b + e
    sub(r6, r6, r3)
    add(r6, 10)  # E = b + e - S + 10
    cmp(r5, 0)
    beq(ZERO)
    cmp(r6, 31)
    bge(BIG)
    cmp(r6, 1)
    bge(NORM)
    neg(r6, r6)
    add(r6, 1)  # k = 1 - E
    sub(r3, r3, r6)  # G = S - k
    mov(r5, 1)
    cmp(r6, 31)
    bge(KBIG)
    lsl(r5, r6)
    sub(r5, 1)
    add(r5, r5, r4)
    lsr(r5, r6)  # Mq = (M + 2**k - 1) >> k
    label(KBIG)
    data(2, 0x46AE)  # mov lr, r5: bits = Mq
    data(2, 0x46AC)  # mov r12, r5
    b(CASES)
    label(ZERO)
    mov(r3, 0)  # G
    mov(r5, 0)
    data(2, 0x46AE)  # mov lr, r5
    mov(r5, 1)
    data(2, 0x46AC)  # mov r12, r5
    b(CASES)
    label(BIG)
    data(2, 0xF647, 0x3EFF)  # movw lr, #31743: the largest half
    data(2, 0xF240, 0x7CFF)  # movw r12, #2047
    add(r3, 1)  # G = S + 1
    b(CASES)
    label(NORM)
    lsl(r5, r6, 10)
    add(r5, r5, r4)
    mov(r6, 1)
    lsl(r6, r6, 10)
    sub(r5, r5, r6)  # (E << 10) | (M - 1024)
    data(2, 0x46AE)  # mov lr, r5
    data(2, 0x46A4)  # mov r12, r4: Mq = M; G = S
    label(CASES)
    data(2, 0xF822, 0xEB02)  # strh.w lr, [r2], #2: the head's f16 scale
    mov(r5, 1)
    lsl(r5, r5, 21)
    data(2, 0xFBB5, 0xF5FC)  # udiv r5, r5, r12: RM = 2**21 // Mq
    data(2, 0xF1C7, 0x0600)  # rsb.w r6, r7, #0
    data(2, 0xF386, 0x0B05)  # usat r11, #5, r6
    data(2, 0xF387, 0x0705)  # usat r7, #5, r7
    data(2, 0xF1C3, 0x0600)  # rsb.w r6, r3, #0
    data(2, 0xF386, 0x0E05)  # usat lr, #5, r6
    data(2, 0xF383, 0x0C05)  # usat r12, #5, r3
    mov(r3, r9)
    cmp(r3, 0)
    beq(P2X)
    label(P2)
    data(2, 0xF850, 0x4B04)  # ldr.w r4, [r0], #4
    data(2, 0xEA4F, 0x76E4)  # asr.w r6, r4, #31
    eor(r4, r6)
    sub(r4, r4, r6)  # |v|
    data(2, 0xFA24, 0xF407)  # lsr.w r4, r4, r7
    data(2, 0xFA04, 0xF40B)  # lsl.w r4, r4, r11
    data(2, 0xFA04, 0xF40C)  # lsl.w r4, r4, r12
    data(2, 0xFA24, 0xF40E)  # lsr.w r4, r4, lr
    mul(r4, r5)
    data(2, 0xF504, 0x1480)  # add.w r4, r4, #0x100000
    lsr(r4, r4, 21)
    data(2, 0xF384, 0x0407)  # usat r4, #7, r4: at most 127
    eor(r4, r6)
    sub(r4, r4, r6)  # the sign back
    data(2, 0xF801, 0x4B01)  # strb.w r4, [r1], #1
    sub(r3, 1)
    bne(P2)
    label(P2X)
    mov(r4, r8)
    sub(r4, 1)
    mov(r8, r4)
    beq(END)
    b(HEAD)
    label(END)
    mov(r0, 0)
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}


@micropython.asm_thumb
def q_normgain(r0, r1, r2, r3):
    # r0 x (the residual), r1 g (the gains), r2 z, r3 p: kernels.q8_plain.q_normgain. s = max(0, bitlen(p[1]) - 15)
    # by CLZ (back into p[1]); per value a = |x| >> s, ss += (a * a) >> LN, z = sign(x) * ((a * g) >> 15) (the sign
    # by its mask); p[3] = ss; returns max |z|. r8 s, r9 LN, r10 ss, r11 the largest |z|, r12 p.
    data(2, 0xE92D, 0x5F00)  # push.w {r8, r9, r10, r11, r12, lr}
    ldr(r4, [r3, 4])  # A = max |x|
    data(2, 0xFAB4, 0xF584)  # clz r5, r4
    mov(r6, 17)
    sub(r5, r6, r5)  # s = bitlen(A) - 15
    bge(SPOS)
    mov(r5, 0)
    label(SPOS)
    str(r5, [r3, 4])
    mov(r8, r5)  # s
    ldr(r4, [r3, 8])
    mov(r9, r4)  # LN
    mov(r4, 0)
    mov(r10, r4)  # ss
    mov(r11, r4)  # the largest |z|
    data(2, 0x469C)  # mov r12, r3: p
    ldr(r3, [r3, 0])  # n
    cmp(r3, 0)
    beq(END)
    label(LOOP)
    data(2, 0xF850, 0x4B04)  # ldr.w r4, [r0], #4
    data(2, 0xEA4F, 0x75E4)  # asr.w r5, r4, #31
    eor(r4, r5)
    sub(r4, r4, r5)
    data(2, 0xFA24, 0xF408)  # lsr.w r4, r4, r8: a = |x| >> s
    data(2, 0xFB04, 0xF604)  # mul.w r6, r4, r4
    data(2, 0xFA26, 0xF609)  # lsr.w r6, r6, r9
    data(2, 0xEB0A, 0x0A06)  # add.w r10, r10, r6, lsl #0: ss += (a * a) >> LN
    data(2, 0xF851, 0x6B04)  # ldr.w r6, [r1], #4
    mul(r6, r4)
    asr(r6, r6, 15)
    eor(r6, r5)
    sub(r6, r6, r5)  # z = sign(x) * ((a * g) >> 15)
    data(2, 0xF842, 0x6B04)  # str.w r6, [r2], #4
    data(2, 0xEA86, 0x77E6)  # eor.w r7, r6, r6, asr #31
    data(2, 0xEBA7, 0x77E6)  # sub.w r7, r7, r6, asr #31
    data(2, 0x455F)  # cmp r7, r11
    data(2, 0xBFC8)  # it gt
    data(2, 0x46BB)  # mov r11, r7
    sub(r3, 1)
    bne(LOOP)
    label(END)
    data(2, 0x4663)  # mov r3, r12
    data(2, 0x4654)  # mov r4, r10
    str(r4, [r3, 12])  # p[3] = ss
    data(2, 0x4658)  # mov r0, r11
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}


@micropython.asm_thumb
def q_rope(r0, r1, r2, r3):
    # r0 v, r1 cs (cos, sin a pair in Q14), r2 n, r3 hd: kernels.q8_plain.q_rope. Each pair (a, b) by LDRD with its
    # (c, s) (cs back to its start after a head's last pair), the four products by SMULL floored at bit 14 (the plain
    # kernel's 14-bit halves give the same floor), x = ac - bs and y = as + bc clamped to +-VMAX by SSAT (-2**29 to
    # -VMAX), stored by STRD. Encodings: LDRD Rt, Rt2, [Rn]  0xE9D0 | Rn, Rt << 12 | Rt2 << 8; post-indexed LDRD /
    # STRD  0xE8F0 / 0xE8E0 | Rn, Rt << 12 | Rt2 << 8 | i / 4; LSR.W Rd, Rm, #s  0xEA4F, (s >> 2) << 12 | Rd << 8 |
    # (s & 3) << 6 | 0x10 | Rm.
    data(2, 0xE92D, 0x5F00)  # push.w {r8, r9, r10, r11, r12, lr}
    data(2, 0x468C)  # mov r12, r1: cs
    lsl(r3, r3, 2)
    add(r3, r3, r1)
    data(2, 0x469E)  # mov lr, r3: cs's end (hd words: a head's pairs)
    lsr(r2, r2, 1)  # pairs
    beq(END)
    label(LOOP)
    data(2, 0xE9D0, 0x4500)  # ldrd r4, r5, [r0]: a, b
    data(2, 0xE8F1, 0x6702)  # ldrd r6, r7, [r1], #8: c, s
    data(2, 0x4571)  # cmp r1, lr
    data(2, 0xBF08)  # it eq
    data(2, 0x4661)  # mov r1, r12: the next head's first pair
    data(2, 0xFB84, 0x8906)  # smull r8, r9, r4, r6
    data(2, 0xFB85, 0xAB07)  # smull r10, r11, r5, r7
    data(2, 0xEA4F, 0x3898)  # lsr.w r8, r8, #14
    data(2, 0xEA48, 0x4889)  # orr.w r8, r8, r9, lsl #18: floor(. / 2**14)
    data(2, 0xEA4F, 0x3A9A)  # lsr.w r10, r10, #14
    data(2, 0xEA4A, 0x4A8B)  # orr.w r10, r10, r11, lsl #18: floor(. / 2**14)
    data(2, 0xEBA8, 0x030A)  # sub.w r3, r8, r10, lsl #0: x = ac - bs
    data(2, 0xFB84, 0x8907)  # smull r8, r9, r4, r7
    data(2, 0xFB85, 0xAB06)  # smull r10, r11, r5, r6
    data(2, 0xEA4F, 0x3898)  # lsr.w r8, r8, #14
    data(2, 0xEA48, 0x4889)  # orr.w r8, r8, r9, lsl #18: floor(. / 2**14)
    data(2, 0xEA4F, 0x3A9A)  # lsr.w r10, r10, #14
    data(2, 0xEA4A, 0x4A8B)  # orr.w r10, r10, r11, lsl #18: floor(. / 2**14)
    data(2, 0xEB08, 0x050A)  # add.w r5, r8, r10, lsl #0: y = as + bc
    data(2, 0xF303, 0x031D)  # ssat r3, #30, r3
    data(2, 0xF113, 0x5F00)  # cmn.w r3, #0x20000000
    data(2, 0xBF08)  # it eq
    data(2, 0x3301)  # add r3, #1: -2**29 to -VMAX
    data(2, 0xF305, 0x051D)  # ssat r5, #30, r5
    data(2, 0xF115, 0x5F00)  # cmn.w r5, #0x20000000
    data(2, 0xBF08)  # it eq
    data(2, 0x3501)  # add r5, #1: -2**29 to -VMAX
    data(2, 0xE8E0, 0x3502)  # strd r3, r5, [r0], #8
    sub(r2, 1)
    bne(LOOP)
    label(END)
    mov(r0, 0)
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}


@micropython.asm_thumb
def q_align(r0, r1, r2, r3):
    # r0 oq, r1 oe, r2 n (unused: p's heads x hd), r3 p: kernels.q8_plain.q_align. emax = max oe[h] (into p[2]); per
    # head k = min(emax - oe[h], 31) by USAT, per value |oq| >> k, at most VMAX, the sign back; returns max |oq|.
    # r8 emax, r9 VMAX, r10 the largest |oq|, r11 k.
    data(2, 0xE92D, 0x5F00)  # push.w {r8, r9, r10, r11, r12, lr}
    ldr(r4, [r3, 0])  # heads
    ldr(r5, [r3, 4])  # hd
    ldr(r6, [r1, 0])
    mov(r8, r6)  # emax = oe[0]
    mov(r2, r1)
    mov(r7, r4)
    cmp(r7, 0)
    beq(EX)
    label(EM)
    data(2, 0xF852, 0x6B04)  # ldr.w r6, [r2], #4
    data(2, 0x4546)  # cmp r6, r8
    data(2, 0xBFC8)  # it gt
    data(2, 0x46B0)  # mov r8, r6
    sub(r7, 1)
    bne(EM)
    label(EX)
    data(2, 0x4646)  # mov r6, r8
    str(r6, [r3, 8])  # p[2] = emax
    mov(r6, 1)
    lsl(r6, r6, 29)
    sub(r6, 1)
    mov(r9, r6)  # VMAX
    mov(r6, 0)
    mov(r10, r6)  # the largest |oq|
    cmp(r4, 0)
    beq(END)
    label(HEAD)
    data(2, 0xF851, 0x6B04)  # ldr.w r6, [r1], #4
    data(2, 0x4647)  # mov r7, r8
    sub(r7, r7, r6)
    data(2, 0xF387, 0x0B05)  # usat r11, #5, r7: k = min(emax - oe[h], 31)
    mov(r2, r5)
    cmp(r2, 0)
    beq(HX)
    label(EL)
    ldr(r6, [r0, 0])
    data(2, 0xEA4F, 0x77E6)  # asr.w r7, r6, #31
    eor(r6, r7)
    sub(r6, r6, r7)
    data(2, 0xFA26, 0xF60B)  # lsr.w r6, r6, r11
    data(2, 0x454E)  # cmp r6, r9
    data(2, 0xBFC8)  # it gt
    data(2, 0x464E)  # mov r6, r9: at most VMAX
    data(2, 0x4556)  # cmp r6, r10
    data(2, 0xBFC8)  # it gt
    data(2, 0x46B2)  # mov r10, r6
    eor(r6, r7)
    sub(r6, r6, r7)
    data(2, 0xF840, 0x6B04)  # str.w r6, [r0], #4
    sub(r2, 1)
    bne(EL)
    label(HX)
    sub(r4, 1)
    bne(HEAD)
    label(END)
    data(2, 0x4650)  # mov r0, r10
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}


@micropython.asm_thumb
def q_quant(r0, r1, r2, r3):
    # r0 z (int32), r1 codes (int32), r2 n, r3 p: kernels.q8_plain.q_quant, two values a step: c = sign(z) *
    # min(C, ((|z| >> s) * R + 2**(K-1)) >> K) (s < 0: a left shift; both amounts by USAT). r8 and r9 the shifts,
    # r10 R, r11 K, r12 2**(K-1), lr C; r5 each value's sign mask. (A core with the DSP instructions takes
    # kernels.q8_dsp_thumb's, which packs the codes for its q_mv.)
    data(2, 0xE92D, 0x5F00)  # push.w {r8, r9, r10, r11, r12, lr}
    ldr(r4, [r3, 0])  # s
    data(2, 0xF384, 0x0805)  # usat r8, #5, r4: right by max(s, 0)
    data(2, 0xF1C4, 0x0400)  # rsb.w r4, r4, #0
    data(2, 0xF384, 0x0905)  # usat r9, #5, r4: left by max(-s, 0)
    ldr(r4, [r3, 4])
    mov(r10, r4)  # R
    ldr(r4, [r3, 8])
    mov(r11, r4)  # K
    sub(r4, 1)
    mov(r5, 1)
    lsl(r5, r4)
    mov(r12, r5)  # half = 2**(K - 1)
    ldr(r4, [r3, 12])
    data(2, 0x46A6)  # mov lr, r4: C
    lsr(r3, r2, 1)  # pairs
    beq(ONE)
    label(P2)
    data(2, 0xF850, 0x4B04)  # ldr.w r4, [r0], #4
    data(2, 0xEA4F, 0x75E4)  # asr.w r5, r4, #31
    eor(r4, r5)
    sub(r4, r4, r5)  # |z|
    data(2, 0xFA24, 0xF408)  # lsr.w r4, r4, r8
    data(2, 0xFA04, 0xF409)  # lsl.w r4, r4, r9
    data(2, 0xFB04, 0xC40A)  # mla r4, r4, r10, r12: v * R + half
    data(2, 0xFA24, 0xF40B)  # lsr.w r4, r4, r11
    data(2, 0x4574)  # cmp r4, lr
    data(2, 0xBFC8)  # it gt
    data(2, 0x4674)  # mov r4, lr: at most C
    eor(r4, r5)
    sub(r4, r4, r5)  # the sign back
    data(2, 0xF841, 0x4B04)  # str.w r4, [r1], #4
    data(2, 0xF850, 0x4B04)  # ldr.w r4, [r0], #4
    data(2, 0xEA4F, 0x75E4)  # asr.w r5, r4, #31
    eor(r4, r5)
    sub(r4, r4, r5)  # |z|
    data(2, 0xFA24, 0xF408)  # lsr.w r4, r4, r8
    data(2, 0xFA04, 0xF409)  # lsl.w r4, r4, r9
    data(2, 0xFB04, 0xC40A)  # mla r4, r4, r10, r12: v * R + half
    data(2, 0xFA24, 0xF40B)  # lsr.w r4, r4, r11
    data(2, 0x4574)  # cmp r4, lr
    data(2, 0xBFC8)  # it gt
    data(2, 0x4674)  # mov r4, lr: at most C
    eor(r4, r5)
    sub(r4, r4, r5)  # the sign back
    data(2, 0xF841, 0x4B04)  # str.w r4, [r1], #4
    sub(r3, 1)
    bne(P2)
    label(ONE)
    mov(r3, 1)
    and_(r3, r2)
    beq(END)
    data(2, 0xF850, 0x4B04)  # ldr.w r4, [r0], #4
    data(2, 0xEA4F, 0x75E4)  # asr.w r5, r4, #31
    eor(r4, r5)
    sub(r4, r4, r5)  # |z|
    data(2, 0xFA24, 0xF408)  # lsr.w r4, r4, r8
    data(2, 0xFA04, 0xF409)  # lsl.w r4, r4, r9
    data(2, 0xFB04, 0xC40A)  # mla r4, r4, r10, r12: v * R + half
    data(2, 0xFA24, 0xF40B)  # lsr.w r4, r4, r11
    data(2, 0x4574)  # cmp r4, lr
    data(2, 0xBFC8)  # it gt
    data(2, 0x4674)  # mov r4, lr: at most C
    eor(r4, r5)
    sub(r4, r4, r5)  # the sign back
    data(2, 0xF841, 0x4B04)  # str.w r4, [r1], #4
    label(END)
    mov(r0, 0)
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}
