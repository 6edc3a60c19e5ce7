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
