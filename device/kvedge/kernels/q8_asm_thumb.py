# @micropython.asm_thumb kernels of the integer forward pass: the matrix-vector product over int8 rows (most of
# a token's multiply-accumulates; int4 rows: kernels.q4_asm_thumb), in Thumb-1 instructions only
# (the RP2040's Cortex-M0+ has nothing else: no movw, no register-offset loads, no wide branches, no
# it-blocks, no sdiv), so the armv6m .mpy runs on every Cortex-M MicroPython port with the inline assembler. Same
# arithmetic as kernels.q8_plain (see there); the other q_* kernels come from kernels.q8_viper.
#
# Calling convention of @micropython.asm_thumb: up to four arguments in r0-r3 (a buffer arrives as the address
# of its data, an int as its value); r4-r7 are saved by the function's own prologue; r8-r12 must be restored
# by the code (saved here through the low registers on the stack).
import micropython
from kvedge.kernels.q8_viper import (q_scale, q_quant, q_normgain, q_rnorm, q_rope, q_angles, q_swiglu,  # noqa: F401
                                   q_heads, q_align, q_embed, q_argmax, q_store)

OK = True


@micropython.asm_thumb
def q_mv(r0, r1, r2, r3):
    # r0 w (int8 rows), r1 x (int32 codes), r2 out (int32), r3 p (parameter block, P_* of kernels.q8_plain)
    # kept in high registers: r8 p, r9 the out pointer, r10 x, r11 rows left, r12 the row word pointer; r7 the
    # largest |out| written (the return value)
    mov(r4, r8)
    mov(r5, r9)
    mov(r6, r10)
    mov(r7, r11)
    push({r4, r5, r6, r7})
    mov(r4, r12)
    push({r4})
    mov(r8, r3)
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
    lsr(r6, r3, 4)  # 16 products at a time: ldrb, sxtb, ldr, mul, add each
    beq(C4)
    label(L16)
    ldrb(r4, [r0, 0])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 0])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 1])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 4])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 2])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 8])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 3])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 12])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 4])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 16])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 5])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 20])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 6])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 24])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 7])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 28])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 8])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 32])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 9])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 36])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 10])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 40])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 11])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 44])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 12])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 48])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 13])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 52])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 14])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 56])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 15])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 60])
    mul(r4, r5)
    add(r2, r2, r4)
    add(r0, 16)
    add(r1, 64)
    sub(r6, 1)
    bne(L16)
    label(C4)
    mov(r6, 15)
    and_(r6, r3)  # cols & 15
    lsr(r3, r6, 2)
    beq(C1)
    label(L4)
    ldrb(r4, [r0, 0])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 0])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 1])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 4])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 2])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 8])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 3])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 12])
    mul(r4, r5)
    add(r2, r2, r4)
    add(r0, 4)
    add(r1, 16)
    sub(r3, 1)
    bne(L4)
    label(C1)
    mov(r3, 3)
    and_(r3, r6)
    beq(DQ)
    label(L1)
    ldrb(r4, [r0, 0])
    data(2, 0xB264)  # sxtb r4, r4: the weight as int8
    ldr(r5, [r1, 0])
    mul(r4, r5)
    add(r2, r2, r4)
    add(r0, 1)
    add(r1, 4)
    sub(r3, 1)
    bne(L1)
    # the row's value: two floor multiplications by 15-bit mantissas, then the row's shift + os
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


# On an Armv7-M core and up, the small steps in Thumb-2 (kernels.q8_steps_v7m_thumb), absent or refused elsewhere, and
# not even tried on an Armv6-M firmware (a failed import cost the emulated Cortex-M0 ~18,000 instructions a token).
if __import__("kvedge.kernels").kernels.arch() >= 5:
    try:
        from kvedge.kernels.q8_steps_v7m_thumb import (q_swiglu, q_heads, q_normgain, q_rope, q_align,  # noqa: F811
                                                         q_quant)
    except ImportError:
        pass


# On a core with Armv7E-M's DSP instructions the matrix-vector product is kernels.q8_dsp_thumb's, with its q_quant that
# packs the input for it; else on an Armv7-M core (the Cortex-M3) kernels.q8_v7m_thumb's Thumb-2 q_mv. Each module is
# absent, or refuses to load, everywhere else. (No new names here: each one would cost every run of this module on
# an RP2040.)
try:
    from kvedge.kernels.q8_dsp_thumb import q_quant, q_mv  # noqa: F811
except ImportError:
    try:
        from kvedge.kernels.q8_v7m_thumb import q_mv  # noqa: F811
    except ImportError:
        pass
