# q_mv, q_quant and q_mv4 for Xtensa cores whose MicroPython has the inline assembler (@micropython.asm_xtensa:
# the ESP8266 port and the lx106 stand-in; an ESP32's MicroPython has none by default, and there this module does
# not load). kvedge.kernels.q8_viper takes its q_mv and q_quant from here on a call0 Xtensa port (its probe),
# kvedge.kernels.q4_viper its q_mv4 (int4 rows); the other q_* kernels stay viper. Same arithmetic as
# kvedge.kernels.q8_plain and kernels.q4_plain, bit for bit, in 32-bit words as the viper ones. q_mv:
# 128 * sum(x) into p[7]; per row the dot product sum(u * x) of the int8 rows read offset-binary (u = b ^ 128:
# Xtensa has no signed byte load) and int32 codes x, eight products a loop step (l8ui, xor, l32i, mull, add:
# five instructions a product) and the row's last cols % 8 one at a
# time, started at -128 * sum(x); then the two 15-bit mantissa products, the shift by (sw & 255) + os (right,
# at most 31; left with saturation; beyond -30 saturation), the add, the clamp to +-VMAX and max |out|.
# Every sum stays within +-2**30 (pass_int.code_max bounds the codes). Nothing is allocated.
#
# mpy-cross 1.29 asserts (label offsets differ between its passes) on a conditional branch to a label further
# on once any label is defined before it, and the device's compiler would emit wrong code there: every
# conditional branch here goes back. Loops test at their bottom (entered by a forward j), and the rare cases of
# the row's tail sit before the row loop as blocks that end in a j forward into it.
import micropython

OK = True


@micropython.asm_xtensa
def q_mv(a2, a3, a4, a5):
    # a2: the weights' buffer, a3: the codes (int32), a4: out (int32), a5: p (kvedge.kernels.words's q_mv block)
    l32i(a6, a5, 8)  # cols
    slli(a7, a6, 2)
    add(a7, a7, a3)  # the codes' end
    mov(a8, a3)
    movi(a9, 0)
    j(SXT)
    label(SXL)
    l32i(a10, a8, 0)
    add(a9, a9, a10)
    addi(a8, a8, 4)
    label(SXT)
    bne(a8, a7, SXL)
    slli(a9, a9, 7)
    s32i(a9, a5, 28)  # p[7] = sx = 128 * sum(x)
    l32i(a10, a5, 0)
    add(a2, a2, a10)  # the first row (wo)
    l32i(a10, a5, 24)  # ro
    slli(a10, a10, 2)
    add(a4, a4, a10)  # out + ro
    add(a6, a5, a10)
    addi(a6, a6, 32)  # the rows' scale words, p + 8 + ro
    l32i(a7, a5, 4)  # rows
    slli(a7, a7, 2)
    add(a7, a7, a6)  # the scale words' end
    movi(a12, 0)  # max |out|
    j(ROWT)
    # ---- the row's rare cases (reached by branches back, returning by a j forward) ----
    label(SATP)  # t = VMAX
    movi(a9, 1)
    slli(a9, a9, 29)
    addi(a9, a9, -1)
    j(SHIFTED)
    label(SATN)  # t = -VMAX
    movi(a9, 1)
    slli(a9, a9, 29)
    addi(a9, a9, -1)
    neg(a9, a9)
    j(SHIFTED)
    label(NEGBIG)  # shift <= -30: the sign's saturation
    movi(a11, 0)
    blt(a11, a9, SATP)
    bltz(a9, SATN)
    j(SHIFTED)
    label(K31)  # shift > 31: 31
    movi(a10, 31)
    j(KPOS)
    label(NEG)  # left shift by -k, saturating beyond lim = VMAX >> -k
    neg(a10, a10)
    movi(a11, 30)
    bge(a10, a11, NEGBIG)
    movi(a11, 1)
    slli(a11, a11, 29)
    addi(a11, a11, -1)
    ssr(a10)
    sra(a11, a11)  # lim
    blt(a11, a9, SATP)
    neg(a11, a11)
    blt(a9, a11, SATN)
    ssl(a10)
    sll(a9, a9)
    j(SHIFTED)
    label(ADDB)  # add: t += out
    l32i(a11, a4, 0)
    add(a9, a9, a11)
    j(ADDED)
    label(CLP)
    mov(a9, a11)
    j(CLAMPED)
    label(CLN)
    mov(a9, a14)
    j(CLAMPED)
    label(BIGB)
    mov(a12, a9)
    j(BIGGED)
    # ---- a row ----
    label(ROW)
    l32i(a9, a5, 28)
    neg(a9, a9)  # the sum starts at -sx
    mov(a8, a3)
    l32i(a10, a5, 8)
    srli(a11, a10, 3)
    slli(a11, a11, 3)  # cols & ~7
    add(a13, a2, a11)  # the end of the groups of eight
    movi(a10, 128)  # int8 bytes to offset-binary, (b ^ 128) = code + 128: no l8si on Xtensa
    j(T8)
    label(EIGHT)
    l8ui(a11, a2, 0)
    xor(a11, a11, a10)
    l32i(a14, a8, 0)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    l8ui(a11, a2, 1)
    xor(a11, a11, a10)
    l32i(a14, a8, 4)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    l8ui(a11, a2, 2)
    xor(a11, a11, a10)
    l32i(a14, a8, 8)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    l8ui(a11, a2, 3)
    xor(a11, a11, a10)
    l32i(a14, a8, 12)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    l8ui(a11, a2, 4)
    xor(a11, a11, a10)
    l32i(a14, a8, 16)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    l8ui(a11, a2, 5)
    xor(a11, a11, a10)
    l32i(a14, a8, 20)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    l8ui(a11, a2, 6)
    xor(a11, a11, a10)
    l32i(a14, a8, 24)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    l8ui(a11, a2, 7)
    xor(a11, a11, a10)
    l32i(a14, a8, 28)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    addi(a2, a2, 8)
    addi(a8, a8, 32)
    label(T8)
    bne(a2, a13, EIGHT)
    l32i(a13, a5, 8)
    movi(a14, 7)
    and_(a13, a13, a14)  # cols & 7
    add(a13, a2, a13)  # the row's end
    j(T1)
    label(ONE)
    l8ui(a11, a2, 0)
    xor(a11, a11, a10)
    l32i(a14, a8, 0)
    mull(a11, a11, a14)
    add(a9, a9, a11)
    addi(a2, a2, 1)
    addi(a8, a8, 4)
    label(T1)
    bne(a2, a13, ONE)
    # s = a9; sw = the row's scale word: t = (s >> 15) * m + (((s & 32767) * m) >> 15), m = sw >> 8
    l32i(a10, a6, 0)
    srai(a11, a10, 8)  # m
    slli(a14, a11, 8)
    sub(a10, a10, a14)  # sw & 255
    l32i(a14, a5, 16)
    add(a10, a10, a14)  # k = (sw & 255) + os
    srai(a14, a9, 15)
    slli(a8, a14, 15)
    sub(a8, a9, a8)
    mull(a14, a14, a11)
    mull(a8, a8, a11)
    srai(a8, a8, 15)
    add(a9, a14, a8)
    l32i(a11, a5, 12)  # xm: the same again
    srai(a14, a9, 15)
    slli(a8, a14, 15)
    sub(a8, a9, a8)
    mull(a14, a14, a11)
    mull(a8, a8, a11)
    srai(a8, a8, 15)
    add(a9, a14, a8)
    bltz(a10, NEG)
    movi(a11, 31)
    blt(a11, a10, K31)
    label(KPOS)
    ssr(a10)
    sra(a9, a9)
    label(SHIFTED)
    l32i(a10, a5, 20)  # add
    bnez(a10, ADDB)
    label(ADDED)
    movi(a11, 1)
    slli(a11, a11, 29)
    addi(a11, a11, -1)  # VMAX
    blt(a11, a9, CLP)
    neg(a14, a11)
    blt(a9, a14, CLN)
    label(CLAMPED)
    s32i(a9, a4, 0)
    abs_(a9, a9)
    blt(a12, a9, BIGB)
    label(BIGGED)
    addi(a4, a4, 4)
    addi(a6, a6, 4)
    label(ROWT)
    bne(a6, a7, ROW)
    mov(a2, a12)


@micropython.asm_xtensa
def q_mv4(a2, a3, a4, a5):
    # int4 rows (kvedge.kernels.q4_plain.q_mv4): a2 the weights' buffer (codes and f16 scales), a3 the codes x
    # (int32), a4 out, a5 p. A group (16 bytes, 32 products) a loop step, unrolled; the row's x pointer goes back
    # by the groups' 128 bytes each (a3, x's base, is freed for a temporary)
    l32i(a10, a5, 28)
    add(a6, a2, a10)  # the first group's f16 scale (P4_SO)
    l32i(a10, a5, 0)
    add(a2, a2, a10)  # the first row's codes (wo)
    mov(a8, a3)  # x
    l32i(a10, a5, 24)  # ro
    slli(a10, a10, 2)
    add(a4, a4, a10)  # out + ro
    l32i(a7, a5, 4)  # rows left
    movi(a12, 0)  # max |out|
    j(ROWT)
    # ---- rare cases (reached by branches back, returning by a j forward) ----
    label(KZ)  # a subnormal scale: field 1, no implicit bit
    movi(a3, 1)
    j(KZD)
    label(K31G)
    movi(a3, 31)
    j(K31GD)
    label(SATP)
    movi(a9, 1)
    slli(a9, a9, 29)
    addi(a9, a9, -1)
    j(SHIFTED)
    label(SATN)
    movi(a9, 1)
    slli(a9, a9, 29)
    addi(a9, a9, -1)
    neg(a9, a9)
    j(SHIFTED)
    label(NEGBIG)
    movi(a11, 0)
    blt(a11, a9, SATP)
    bltz(a9, SATN)
    j(SHIFTED)
    label(K31)
    movi(a10, 31)
    j(KPOS)
    label(NEG)
    neg(a10, a10)
    movi(a11, 30)
    bge(a10, a11, NEGBIG)
    movi(a11, 1)
    slli(a11, a11, 29)
    addi(a11, a11, -1)
    ssr(a10)
    sra(a11, a11)
    blt(a11, a9, SATP)
    neg(a11, a11)
    blt(a9, a11, SATN)
    ssl(a10)
    sll(a9, a9)
    j(SHIFTED)
    label(ADDB)
    l32i(a11, a4, 0)
    add(a9, a9, a11)
    j(ADDED)
    label(CLP)
    mov(a9, a11)
    j(CLAMPED)
    label(CLN)
    mov(a9, a14)
    j(CLAMPED)
    label(BIGB)
    mov(a12, a9)
    j(BIGGED)
    # ---- a row ----
    label(ROW)
    movi(a9, 0)  # s
    l32i(a13, a5, 8)
    srli(a13, a13, 5)  # groups
    slli(a13, a13, 4)
    add(a13, a13, a2)  # the row's end
    j(GT)
    label(GROUP)
    movi(a10, 0)  # d
    l8ui(a11, a2, 0)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 0)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 4)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 1)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 8)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 12)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 2)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 16)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 20)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 3)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 24)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 28)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 4)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 32)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 36)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 5)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 40)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 44)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 6)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 48)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 52)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 7)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 56)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 60)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 8)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 64)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 68)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 9)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 72)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 76)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 10)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 80)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 84)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 11)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 88)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 92)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 12)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 96)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 100)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 13)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 104)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 108)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 14)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 112)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 116)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    l8ui(a11, a2, 15)
    slli(a14, a11, 24)
    srai(a14, a14, 28)  # the high nibble, signed
    slli(a11, a11, 28)
    srai(a11, a11, 28)  # the low nibble, signed
    l32i(a3, a8, 120)
    mull(a11, a11, a3)
    add(a10, a10, a11)
    l32i(a3, a8, 124)
    mull(a14, a14, a3)
    add(a10, a10, a14)
    addi(a2, a2, 16)
    addi(a8, a8, 64)  # (addi's immediate stops at 127)
    addi(a8, a8, 64)
    # s += (d * (m >> 3)) >> min(EG - e, 31), the group's f16 scale h: m = h & 1023 (| 1024 unless e = 0: 1)
    l8ui(a11, a6, 0)
    l8ui(a14, a6, 1)
    slli(a14, a14, 8)
    or_(a11, a11, a14)  # h
    addi(a6, a6, 2)
    srli(a3, a11, 10)  # e
    slli(a14, a3, 10)
    sub(a14, a11, a14)  # m
    beqz(a3, KZ)
    movi(a11, 1024)
    or_(a14, a14, a11)
    label(KZD)
    l32i(a11, a5, 32)  # EG
    sub(a3, a11, a3)
    movi(a11, 31)
    blt(a11, a3, K31G)
    label(K31GD)
    srli(a14, a14, 3)
    mull(a10, a10, a14)
    ssr(a3)
    sra(a10, a10)
    add(a9, a9, a10)
    label(GT)
    bne(a2, a13, GROUP)
    l32i(a11, a5, 8)
    srli(a11, a11, 5)
    slli(a11, a11, 7)
    sub(a8, a8, a11)  # x again from its first code
    # t = (s >> 15) * xm + (((s & 32767) * xm) >> 15), then the shift by os and the rest as q_mv's
    l32i(a11, a5, 12)
    srai(a14, a9, 15)
    slli(a10, a14, 15)
    sub(a10, a9, a10)
    mull(a14, a14, a11)
    mull(a10, a10, a11)
    srai(a10, a10, 15)
    add(a9, a14, a10)
    l32i(a10, a5, 16)  # k = os
    bltz(a10, NEG)
    movi(a11, 31)
    blt(a11, a10, K31)
    label(KPOS)
    ssr(a10)
    sra(a9, a9)
    label(SHIFTED)
    l32i(a10, a5, 20)
    bnez(a10, ADDB)
    label(ADDED)
    movi(a11, 1)
    slli(a11, a11, 29)
    addi(a11, a11, -1)
    blt(a11, a9, CLP)
    neg(a14, a11)
    blt(a9, a14, CLN)
    label(CLAMPED)
    s32i(a9, a4, 0)
    abs_(a9, a9)
    blt(a12, a9, BIGB)
    label(BIGGED)
    addi(a4, a4, 4)
    addi(a7, a7, -1)
    label(ROWT)
    bnez(a7, ROW)
    mov(a2, a12)


@micropython.asm_xtensa
def q_quant(a2, a3, a4, a5):
    # kernels.q8_plain.q_quant: codes[i] = sign(z) * min(((|z| >> s) * R + 2**(K-1)) >> K, C) (s < 0: a left
    # shift), a2 z, a3 codes (int32), a4 n, a5 p = [s, R, K, C]
    l32i(a6, a5, 0)  # s
    l32i(a7, a5, 4)  # R
    l32i(a8, a5, 8)  # K
    l32i(a9, a5, 12)  # C
    movi(a10, 1)
    addi(a11, a8, -1)
    ssl(a11)
    sll(a10, a10)  # half = 2**(K-1)
    j(START)
    # ---- rare cases (reached by branches back, returning by a j forward) ----
    label(SNEG)
    neg(a12, a6)
    movi(a13, 0)
    j(SDONE)
    label(CLAMP)
    mov(a14, a9)
    j(CLAMPED)
    label(NEGB)
    neg(a14, a14)
    j(NEGD)
    label(START)
    movi(a12, 0)  # the left shift (-s when s < 0)
    mov(a13, a6)  # the right shift (s when s >= 0)
    bltz(a6, SNEG)
    label(SDONE)
    slli(a4, a4, 2)
    add(a4, a4, a2)  # z's end
    j(T)
    label(L)
    l32i(a11, a2, 0)
    abs_(a14, a11)
    ssl(a12)
    sll(a14, a14)
    ssr(a13)
    srl(a14, a14)
    mull(a14, a14, a7)
    add(a14, a14, a10)
    ssr(a8)
    sra(a14, a14)
    blt(a9, a14, CLAMP)
    label(CLAMPED)
    bltz(a11, NEGB)
    label(NEGD)
    s32i(a14, a3, 0)
    addi(a2, a2, 4)
    addi(a3, a3, 4)
    label(T)
    bne(a2, a4, L)
    movi(a2, 0)
