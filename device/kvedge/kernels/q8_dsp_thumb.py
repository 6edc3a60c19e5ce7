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

@micropython.asm_thumb
def q_quant(r0, r1, r2, r3):
    # r0 z (int32), r1 codes (the packed input, the layout above), r2 n, r3 p: kernels.q8_plain.q_quant's codes c =
    # sign(z) * min(C, ((|z| >> s) * R + 2**(K-1)) >> K) (s < 0: a left shift; both amounts by USAT), four values a
    # step stored as their pairs want them (halfwords 0, 2, 1, 3 of the group), then the n % 4 last ones. r8 and r9
    # the shifts, r10 R, r11 K, r12 2**(K-1), lr C; r5 each value's sign mask. Thumb-2 encodings (beyond those
    # below): STRH.W Rt, [Rn, #i12]  0xF8A0 | Rn, Rt << 12 | i12; STRH.W Rt, [Rn], #i  0xF820 | Rn, Rt << 12 | 0xB00 | i;
    # RSB.W Rd, Rn, #0  0xF1C0 | Rn, Rd << 8; ASR.W Rd, Rm, #s  0xEA4F, (s >> 2) << 12 | Rd << 8 | (s & 3) << 6 | 0x20 | Rm;
    # LSL.W/LSR.W Rd, Rn, Rm  0xFA00 / 0xFA20 | Rn, 0xF000 | Rd << 8 | Rm; CMP Rn, Rm (any registers)
    # 0x4500 | (Rn >> 3) << 7 | Rm << 3 | (Rn & 7).
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
    mov(r4, 0)
    str(r4, [r1, 0])
    str(r2, [r1, 4])  # words 0 and 1: 0, n
    add(r1, 8)
    lsr(r3, r2, 2)  # groups of four
    beq(TAIL)
    label(G4)
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
    data(2, 0xF8A1, 0x4000)  # strh.w r4, [r1, #0]
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
    data(2, 0xF8A1, 0x4004)  # strh.w r4, [r1, #4]
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
    data(2, 0xF8A1, 0x4002)  # strh.w r4, [r1, #2]
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
    data(2, 0xF8A1, 0x4006)  # strh.w r4, [r1, #6]
    add(r1, 8)
    sub(r3, 1)
    bne(G4)
    label(TAIL)
    mov(r3, 3)
    and_(r3, r2)
    beq(END)
    label(T1)
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
    data(2, 0xF821, 0x4B02)  # strh.w r4, [r1], #2
    sub(r3, 1)
    bne(T1)
    label(END)
    mov(r0, 0)
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}


@micropython.asm_thumb
def q_mv(r0, r1, r2, r3):
    # r0 w (int8 rows), r1 x (packed by q_quant), r2 out (int32), r3 p (parameter block, P_* of kernels.q8_plain).
    # Two rows a pass against one read of the input: per four columns LDR of each row's word, two LDRs of x's pairs,
    # four SXTB16 and four SMLAD (1.5 instructions a multiply-accumulate; 16 columns a loop step, the loads of the
    # step's first group post-indexed). Each row's end in Thumb-2 (raw encodings, below): SMULL for the row's and
    # the input's 15-bit mantissas, USAT for the shift's cap, SSAT for the clamp at +-VMAX, IT blocks.
    # Registers in the loop: r0 row A, r2 row B, r1 x, r3-r7 and r12 the words, r8 and r9 the two sums, lr the
    # count; r10 the row word pointer and r11 xm throughout; the rest of the state on the stack (sp + 0: x's pairs,
    # 4 out, 8 os, 12 the add mask, 16 the largest |out|, 20 rows left, 24 cols >> 4, 28 (cols >> 2) & 3,
    # 32 cols & 3, 36 cols). r8-r12 and lr are saved by PUSH.W and restored by POP.W. An odd last row is read as
    # row B too and B's result dropped. Encodings beyond the two above (ARMv7-M ARM, section A7.7):
    #   LDR.W/STR.W Rt, [Rn], #i (post-indexed)  0xF850 / 0xF840 | Rn, Rt << 12 | 0xB00 | i; LDRSB.W 0xF910, LDRSH.W 0xF930
    #   LDR.W Rt, [Rn, #i12]  0xF8D0 | Rn, Rt << 12 | i12       SMULL lo, hi, Rn, Rm  0xFB80 | Rn, lo << 12 | hi << 8 | Rm
    #   MLA Rd, Rn, Rm, Ra  0xFB00 | Rn, Ra << 12 | Rd << 8 | Rm      ORR.W/EOR.W/SUB.W Rd, Rn, Rm, sh #s  0xEA40 /
    #   0xEA80 / 0xEBA0 | Rn, s >> 2 << 12 | Rd << 8 | (s & 3) << 6 | type << 4 | Rm (type 0 LSL, 2 ASR)
    #   ADDS.W 0xEB10 | Rn, Rd << 8 | Rm; AND.W 0xEA00 | Rn, Rd << 8 | Rm; ASR.W Rd, Rn, Rm 0xFA40 | Rn, 0xF000 | Rd << 8 | Rm
    #   USAT Rd, #s, Rn  0xF380 | Rn, Rd << 8 | s;  SSAT Rd, #s, Rn  0xF300 | Rn, Rd << 8 | s - 1
    #   CMN.W Rn, #2**29  0xF110 | Rn, 0x5F00;  SUBS.W Rd, Rn, #i  0xF1B0 | Rn, Rd << 8 | i;  IT c  0xBF08 | c << 4
    #   MOV Rd, Rm (any registers)  0x4600 | (Rd >> 3) << 7 | Rm << 3 | (Rd & 7);  UXTB  0xB2C0 | Rm << 3 | Rd
    #   LDR/STR Rt, [sp, #4i]  0x9800 / 0x9000 | Rt << 8 | i;  SUB/ADD sp, #4i  0xB080 / 0xB000 | i
    #   PUSH.W / POP.W {list}  0xE92D / 0xE8BD, list
    data(2, 0xE92D, 0x5F00)  # push.w {r8, r9, r10, r11, r12, lr}
    data(2, 0xB08A)  # sub sp, #40
    add(r1, 8)
    data(2, 0x9100)  # str r1, [sp, #0]: x's pairs
    ldr(r4, [r3, 0])  # wo
    add(r0, r0, r4)
    ldr(r4, [r3, 24])  # ro
    lsl(r4, r4, 2)
    add(r5, r2, r4)
    data(2, 0x9501)  # str r5, [sp, #4]: out + ro
    add(r4, r4, r3)
    add(r4, 32)
    mov(r10, r4)  # p + 4 * (P_HDR + ro): the first row's word
    ldr(r4, [r3, 16])  # os
    data(2, 0x9402)  # str r4, [sp, #8]
    ldr(r4, [r3, 20])  # add
    neg(r5, r4)
    orr(r4, r5)
    asr(r4, r4, 31)  # -1 where add != 0, else 0
    data(2, 0x9403)  # str r4, [sp, #12]
    mov(r4, 0)
    data(2, 0x9404)  # str r4, [sp, #16]: the largest |out|
    ldr(r4, [r3, 4])
    data(2, 0x9405)  # str r4, [sp, #20]: rows left
    ldr(r4, [r3, 12])
    mov(r11, r4)  # xm
    ldr(r4, [r3, 8])  # cols
    data(2, 0x9409)  # str r4, [sp, #36]
    lsr(r5, r4, 4)
    data(2, 0x9506)  # str r5, [sp, #24]: cols >> 4
    lsl(r5, r4, 28)
    lsr(r5, r5, 30)
    data(2, 0x9507)  # str r5, [sp, #28]: (cols >> 2) & 3
    mov(r5, 3)
    and_(r5, r4)
    data(2, 0x9508)  # str r5, [sp, #32]: cols & 3
    label(PAIR)
    data(2, 0x9C05)  # ldr r4, [sp, #20]
    cmp(r4, 0)
    bne(GO)
    b(END)
    label(GO)
    data(2, 0x9E09)  # ldr r6, [sp, #36]
    add(r2, r0, r6)  # row B
    cmp(r4, 1)
    bne(TWO)
    mov(r2, r0)  # one row left: B reads A again, its result is dropped
    label(TWO)
    data(2, 0x9900)  # ldr r1, [sp, #0]
    mov(r3, 0)
    mov(r8, r3)
    mov(r9, r3)
    data(2, 0x9B06)  # ldr r3, [sp, #24]
    data(2, 0x469E)  # mov lr, r3
    cmp(r3, 0)
    beq(C4)
    label(L16)
    ldr(r3, [r0, 4])
    ldr(r4, [r2, 4])
    ldr(r6, [r1, 12])
    ldr(r5, [r1, 8])
    data(2, 0xFA2F, 0xF783)  # sxtb16 r7, r3
    data(2, 0xFA2F, 0xF393)  # sxtb16 r3, r3, ror #8
    data(2, 0xFA2F, 0xFC84)  # sxtb16 r12, r4
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8
    data(2, 0xFB27, 0x8805)  # smlad r8, r7, r5, r8
    data(2, 0xFB23, 0x8806)  # smlad r8, r3, r6, r8
    data(2, 0xFB2C, 0x9905)  # smlad r9, r12, r5, r9
    data(2, 0xFB24, 0x9906)  # smlad r9, r4, r6, r9
    ldr(r3, [r0, 8])
    ldr(r4, [r2, 8])
    ldr(r6, [r1, 20])
    ldr(r5, [r1, 16])
    data(2, 0xFA2F, 0xF783)  # sxtb16 r7, r3
    data(2, 0xFA2F, 0xF393)  # sxtb16 r3, r3, ror #8
    data(2, 0xFA2F, 0xFC84)  # sxtb16 r12, r4
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8
    data(2, 0xFB27, 0x8805)  # smlad r8, r7, r5, r8
    data(2, 0xFB23, 0x8806)  # smlad r8, r3, r6, r8
    data(2, 0xFB2C, 0x9905)  # smlad r9, r12, r5, r9
    data(2, 0xFB24, 0x9906)  # smlad r9, r4, r6, r9
    ldr(r3, [r0, 12])
    ldr(r4, [r2, 12])
    ldr(r6, [r1, 28])
    ldr(r5, [r1, 24])
    data(2, 0xFA2F, 0xF783)  # sxtb16 r7, r3
    data(2, 0xFA2F, 0xF393)  # sxtb16 r3, r3, ror #8
    data(2, 0xFA2F, 0xFC84)  # sxtb16 r12, r4
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8
    data(2, 0xFB27, 0x8805)  # smlad r8, r7, r5, r8
    data(2, 0xFB23, 0x8806)  # smlad r8, r3, r6, r8
    data(2, 0xFB2C, 0x9905)  # smlad r9, r12, r5, r9
    data(2, 0xFB24, 0x9906)  # smlad r9, r4, r6, r9
    data(2, 0xF850, 0x3B10)  # ldr.w r3, [r0], #16
    data(2, 0xF852, 0x4B10)  # ldr.w r4, [r2], #16
    ldr(r6, [r1, 4])
    data(2, 0xF851, 0x5B20)  # ldr.w r5, [r1], #32
    data(2, 0xFA2F, 0xF783)  # sxtb16 r7, r3
    data(2, 0xFA2F, 0xF393)  # sxtb16 r3, r3, ror #8
    data(2, 0xFA2F, 0xFC84)  # sxtb16 r12, r4
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8
    data(2, 0xFB27, 0x8805)  # smlad r8, r7, r5, r8
    data(2, 0xFB23, 0x8806)  # smlad r8, r3, r6, r8
    data(2, 0xFB2C, 0x9905)  # smlad r9, r12, r5, r9
    data(2, 0xFB24, 0x9906)  # smlad r9, r4, r6, r9
    data(2, 0xF1BE, 0x0E01)  # subs.w lr, lr, #1
    bne(L16)
    label(C4)
    data(2, 0x9B07)  # ldr r3, [sp, #28]
    cmp(r3, 0)
    beq(C1)
    data(2, 0x469E)  # mov lr, r3
    label(L4)
    data(2, 0xF850, 0x3B04)  # ldr.w r3, [r0], #4
    data(2, 0xF852, 0x4B04)  # ldr.w r4, [r2], #4
    ldr(r6, [r1, 4])
    data(2, 0xF851, 0x5B08)  # ldr.w r5, [r1], #8
    data(2, 0xFA2F, 0xF783)  # sxtb16 r7, r3
    data(2, 0xFA2F, 0xF393)  # sxtb16 r3, r3, ror #8
    data(2, 0xFA2F, 0xFC84)  # sxtb16 r12, r4
    data(2, 0xFA2F, 0xF494)  # sxtb16 r4, r4, ror #8
    data(2, 0xFB27, 0x8805)  # smlad r8, r7, r5, r8
    data(2, 0xFB23, 0x8806)  # smlad r8, r3, r6, r8
    data(2, 0xFB2C, 0x9905)  # smlad r9, r12, r5, r9
    data(2, 0xFB24, 0x9906)  # smlad r9, r4, r6, r9
    data(2, 0xF1BE, 0x0E01)  # subs.w lr, lr, #1
    bne(L4)
    label(C1)
    data(2, 0x9B08)  # ldr r3, [sp, #32]
    cmp(r3, 0)
    beq(TAIL)
    data(2, 0x469E)  # mov lr, r3
    label(L1)
    data(2, 0xF910, 0x3B01)  # ldrsb.w r3, [r0], #1
    data(2, 0xF912, 0x4B01)  # ldrsb.w r4, [r2], #1
    data(2, 0xF931, 0x5B02)  # ldrsh.w r5, [r1], #2
    data(2, 0xFB03, 0x8805)  # mla r8, r3, r5, r8
    data(2, 0xFB04, 0x9905)  # mla r9, r4, r5, r9
    data(2, 0xF1BE, 0x0E01)  # subs.w lr, lr, #1
    bne(L1)
    label(TAIL)
    data(2, 0x9F01)  # ldr r7, [sp, #4]: out
    data(2, 0xF8DD, 0xC008)  # ldr.w r12, [sp, #8]: os
    data(2, 0xF8DD, 0xE00C)  # ldr.w lr, [sp, #12]: the add mask
    data(2, 0x9904)  # ldr r1, [sp, #16]: the largest |out|
    data(2, 0xF85A, 0x3B04)  # ldr.w r3, [r10], #4: the row's word, mantissa << 8 | shift
    lsr(r4, r3, 8)
    data(2, 0xFB88, 0x5604)  # smull r5, r6, r8, r4
    lsr(r5, r5, 15)
    data(2, 0xEA45, 0x4546)  # orr.w r5, r5, r6, lsl #17: floor(acc * m / 2**15)
    data(2, 0xFB85, 0x560B)  # smull r5, r6, r5, r11
    lsr(r5, r5, 15)
    data(2, 0xEA45, 0x4546)  # orr.w r5, r5, r6, lsl #17: floor(. * xm / 2**15)
    data(2, 0xB2DB)  # uxtb r3, r3
    data(2, 0xEB13, 0x030C)  # adds.w r3, r3, r12: k = shift + os
    bmi(LEFTA)
    data(2, 0xF383, 0x0305)  # usat r3, #5, r3: min(k, 31)
    data(2, 0xFA45, 0xF503)  # asr.w r5, r5, r3
    label(ADDA)
    ldr(r4, [r7, 0])
    data(2, 0xEA04, 0x040E)  # and.w r4, r4, lr: out's value where p[P_ADD]
    add(r5, r5, r4)
    data(2, 0xF305, 0x051D)  # ssat r5, #30, r5: within [-2**29, VMAX]
    data(2, 0xF115, 0x5F00)  # cmn.w r5, #0x20000000
    data(2, 0xBF08)  # it eq
    data(2, 0x3501)  # add r5, #1: -2**29 to -VMAX
    data(2, 0xF847, 0x5B04)  # str.w r5, [r7], #4
    data(2, 0xEA85, 0x74E5)  # eor.w r4, r5, r5, asr #31
    data(2, 0xEBA4, 0x74E5)  # sub.w r4, r4, r5, asr #31: |out|
    cmp(r4, r1)
    data(2, 0xBFC8)  # it gt
    data(2, 0x4621)  # mov r1, r4
    data(2, 0x9B05)  # ldr r3, [sp, #20]
    sub(r3, 1)
    data(2, 0x9305)  # str r3, [sp, #20]
    beq(DONE)
    data(2, 0xF85A, 0x3B04)  # ldr.w r3, [r10], #4: the row's word, mantissa << 8 | shift
    lsr(r4, r3, 8)
    data(2, 0xFB89, 0x5604)  # smull r5, r6, r9, r4
    lsr(r5, r5, 15)
    data(2, 0xEA45, 0x4546)  # orr.w r5, r5, r6, lsl #17: floor(acc * m / 2**15)
    data(2, 0xFB85, 0x560B)  # smull r5, r6, r5, r11
    lsr(r5, r5, 15)
    data(2, 0xEA45, 0x4546)  # orr.w r5, r5, r6, lsl #17: floor(. * xm / 2**15)
    data(2, 0xB2DB)  # uxtb r3, r3
    data(2, 0xEB13, 0x030C)  # adds.w r3, r3, r12: k = shift + os
    bmi(LEFTB)
    data(2, 0xF383, 0x0305)  # usat r3, #5, r3: min(k, 31)
    data(2, 0xFA45, 0xF503)  # asr.w r5, r5, r3
    label(ADDB)
    ldr(r4, [r7, 0])
    data(2, 0xEA04, 0x040E)  # and.w r4, r4, lr: out's value where p[P_ADD]
    add(r5, r5, r4)
    data(2, 0xF305, 0x051D)  # ssat r5, #30, r5: within [-2**29, VMAX]
    data(2, 0xF115, 0x5F00)  # cmn.w r5, #0x20000000
    data(2, 0xBF08)  # it eq
    data(2, 0x3501)  # add r5, #1: -2**29 to -VMAX
    data(2, 0xF847, 0x5B04)  # str.w r5, [r7], #4
    data(2, 0xEA85, 0x74E5)  # eor.w r4, r5, r5, asr #31
    data(2, 0xEBA4, 0x74E5)  # sub.w r4, r4, r5, asr #31: |out|
    cmp(r4, r1)
    data(2, 0xBFC8)  # it gt
    data(2, 0x4621)  # mov r1, r4
    data(2, 0x9B05)  # ldr r3, [sp, #20]
    sub(r3, 1)
    data(2, 0x9305)  # str r3, [sp, #20]
    label(DONE)
    data(2, 0x9701)  # str r7, [sp, #4]
    data(2, 0x9104)  # str r1, [sp, #16]
    mov(r0, r2)  # the next pair's row A
    b(PAIR)
    label(LEFTA)
    neg(r3, r3)
    cmp(r3, 30)
    bge(SATZA)
    mov(r4, 1)
    lsl(r4, r4, 29)
    sub(r4, 1)
    asr(r4, r3)  # VMAX >> n
    cmp(r5, r4)
    bgt(SATPA)
    neg(r6, r4)
    cmp(r5, r6)
    blt(SATNA)
    lsl(r5, r3)
    b(ADDA)
    label(SATZA)
    cmp(r5, 0)
    bgt(SATPA)
    blt(SATNA)
    b(ADDA)
    label(SATPA)
    mov(r5, 1)
    lsl(r5, r5, 29)
    sub(r5, 1)
    b(ADDA)
    label(SATNA)
    mov(r5, 1)
    lsl(r5, r5, 29)
    sub(r5, 1)
    neg(r5, r5)
    b(ADDA)
    label(LEFTB)
    neg(r3, r3)
    cmp(r3, 30)
    bge(SATZB)
    mov(r4, 1)
    lsl(r4, r4, 29)
    sub(r4, 1)
    asr(r4, r3)  # VMAX >> n
    cmp(r5, r4)
    bgt(SATPB)
    neg(r6, r4)
    cmp(r5, r6)
    blt(SATNB)
    lsl(r5, r3)
    b(ADDB)
    label(SATZB)
    cmp(r5, 0)
    bgt(SATPB)
    blt(SATNB)
    b(ADDB)
    label(SATPB)
    mov(r5, 1)
    lsl(r5, r5, 29)
    sub(r5, 1)
    b(ADDB)
    label(SATNB)
    mov(r5, 1)
    lsl(r5, r5, 29)
    sub(r5, 1)
    neg(r5, r5)
    b(ADDB)
    label(END)
    data(2, 0x9804)  # ldr r0, [sp, #16]
    data(2, 0xB00A)  # add sp, #40
    data(2, 0xE8BD, 0x5F00)  # pop.w {r8, r9, r10, r11, r12, lr}

