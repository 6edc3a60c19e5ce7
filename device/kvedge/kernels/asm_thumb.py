# @micropython.asm_thumb attention kernels: att_head_i8, a query head's every tile in one call, in Thumb-1
# instructions only (the RP2040's Cortex-M0+ has nothing else: no movw, no register-offset loads, no wide
# branches, no it-blocks), so the armv6m .mpy runs on every Cortex-M MicroPython port with the inline
# assembler. The other kernels are the viper ones. Same integers as the tile loop of kvedge.attention around
# att_fill_i8, att_scores_i8, att_rescale, att_weights_i8 and att_wsum_i8 (tested bit-identical).
#
# Arguments (at most four): r0 arena, r1 the query's int8 codes, r2 tile, r3 aux = [slots, exp2 table,
# accumulator, geo] (a list arrives as the address of its items: each item is an array object whose data
# pointer is its fourth word, as MicroPython lays out mp_obj_array_t). High registers r8-r12 hold the arena,
# tile, geo, accumulator and exp2 table and are restored on return. geo (kvedge.attention): the geometry
# (words 0-8), the head's running state (9-13), this kernel's scratch (14-23), the query as ints (24-).
import micropython
from kvedge.kernels.viper import *  # noqa: F401,F403

OK = True


@micropython.asm_thumb
def att_head_i8(r0, r1, r2, r3):
    mov(r4, r8)
    mov(r5, r9)
    mov(r6, r10)
    mov(r7, r11)
    push({r4, r5, r6, r7})
    mov(r4, r12)
    push({r4})
    mov(r8, r0)  # arena
    mov(r9, r2)  # tile
    ldr(r4, [r3, 0])
    ldr(r4, [r4, 12])  # aux[0]: slots (the array object's data pointer)
    ldr(r5, [r3, 4])
    ldr(r5, [r5, 12])
    mov(r12, r5)  # aux[1]: exp2 table (Q14, 'H')
    ldr(r5, [r3, 8])
    ldr(r5, [r5, 12])
    mov(r11, r5)  # aux[2]: accumulator
    ldr(r6, [r3, 12])
    ldr(r6, [r6, 12])
    mov(r10, r6)  # aux[3]: geo
    str(r4, [r6, 56])
    ldr(r3, [r2, 12])  # T
    lsl(r3, r3, 2)  # 4T
    mov(r4, r2)
    add(r4, 64)  # tile + 4 * 16
    add(r5, r4, r3)
    add(r5, r5, r3)
    str(r5, [r6, 84])
    add(r5, r5, r3)
    add(r5, r5, r3)
    add(r5, r5, r3)
    str(r5, [r6, 88])
    add(r5, r5, r3)
    str(r5, [r6, 92])
    ldr(r3, [r2, 4])  # D
    ldr(r4, [r2, 8])  # query offset
    add(r1, r1, r4)
    mov(r5, r6)
    add(r5, 96)
    mov(r2, 0)
    label(QCONV)
    ldrb(r4, [r1, 0])
    lsl(r4, r4, 24)
    asr(r4, r4, 24)
    str(r4, [r5, 0])
    add(r2, r2, r4)
    add(r1, 1)
    add(r5, 4)
    sub(r3, 1)
    bne(QCONV)
    lsl(r2, r2, 7)
    str(r2, [r6, 72])
    mov(r2, 0)
    str(r2, [r6, 76])
    label(TILE)
    mov(r6, r10)
    mov(r2, 0)
    str(r2, [r6, 68])
    str(r2, [r6, 64])
    mov(r2, 1)
    lsl(r2, r2, 29)
    sub(r2, r2, 1)
    neg(r2, r2)
    str(r2, [r6, 60])  # -SAT
    label(P1)
    mov(r6, r10)
    ldr(r0, [r6, 24])  # j
    ldr(r1, [r6, 28])  # n
    cmp(r0, r1)
    blt(P1A)
    b(P1DONE)
    label(P1A)
    ldr(r2, [r6, 68])
    mov(r3, r9)
    ldr(r3, [r3, 12])  # T
    cmp(r2, r3)
    blt(P1B)
    b(P1DONE)
    label(P1B)
    ldr(r4, [r6, 56])
    lsl(r5, r0, 2)
    add(r4, r4, r5)
    ldr(r4, [r4, 0])  # v = slots[j]
    add(r1, r0, 1)
    str(r1, [r6, 24])  # j + 1
    ldr(r5, [r6, 32])  # explicit
    cmp(r5, 0)
    bne(P1S)  # explicit: s = v
    cmp(r4, 0)
    blt(P1)  # an empty slot
    mov(r4, r0)  # s = j
    label(P1S)
    ldr(r5, [r6, 20])  # P
    sub(r4, r4, r5)  # b = s - P
    blt(P1)  # s < P (or an explicit -1)
    ldr(r5, [r6, 92])
    lsl(r3, r2, 2)
    add(r5, r5, r3)
    str(r4, [r5, 0])  # B[nt] = b
    ldr(r5, [r6, 16])  # prow
    mul(r5, r4)
    ldr(r3, [r6, 0])  # kbase
    add(r0, r5, r3)
    mov(r3, r8)
    add(r0, r0, r3)  # the key row
    mov(r1, r6)
    add(r1, 96)  # the query ints
    mov(r2, 0)  # s
    mov(r7, 0x80)
    mov(r3, r9)
    ldr(r3, [r3, 4])  # D
    lsr(r3, r3, 3)
    beq(DOT1)
    label(DOT8)
    ldrb(r4, [r0, 0])
    eor(r4, r7)
    ldr(r5, [r1, 0])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 1])
    eor(r4, r7)
    ldr(r5, [r1, 4])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 2])
    eor(r4, r7)
    ldr(r5, [r1, 8])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 3])
    eor(r4, r7)
    ldr(r5, [r1, 12])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 4])
    eor(r4, r7)
    ldr(r5, [r1, 16])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 5])
    eor(r4, r7)
    ldr(r5, [r1, 20])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 6])
    eor(r4, r7)
    ldr(r5, [r1, 24])
    mul(r4, r5)
    add(r2, r2, r4)
    ldrb(r4, [r0, 7])
    eor(r4, r7)
    ldr(r5, [r1, 28])
    mul(r4, r5)
    add(r2, r2, r4)
    add(r0, 8)
    add(r1, 32)
    sub(r3, 1)
    bne(DOT8)
    label(DOT1)
    mov(r3, r9)
    ldr(r3, [r3, 4])
    mov(r4, 7)
    and_(r3, r4)
    beq(DOTX)
    label(DOT1L)
    ldrb(r4, [r0, 0])
    eor(r4, r7)
    ldr(r5, [r1, 0])
    mul(r4, r5)
    add(r2, r2, r4)
    add(r0, 1)
    add(r1, 4)
    sub(r3, 1)
    bne(DOT1L)
    label(DOTX)
    ldr(r4, [r6, 72])
    sub(r2, r2, r4)  # s = q . k
    ldr(r5, [r6, 92])
    ldr(r4, [r6, 68])
    lsl(r4, r4, 2)
    add(r5, r5, r4)
    ldr(r4, [r5, 0])  # b
    lsl(r4, r4, 1)
    ldr(r5, [r6, 8])  # kmeta
    add(r4, r4, r5)
    mov(r5, r8)
    add(r4, r4, r5)
    ldrb(r5, [r4, 1])
    ldrb(r4, [r4, 0])
    lsl(r5, r5, 8)
    orr(r4, r5)  # h
    lsl(r3, r4, 22)
    lsr(r3, r3, 22)  # m = h & 1023
    lsl(r4, r4, 17)
    lsr(r4, r4, 27)  # e = (h >> 10) & 31
    bne(KEN)
    mov(r4, 1)  # subnormal: e = 1
    b(KE)
    label(KEN)
    mov(r5, 1)
    lsl(r5, r5, 10)
    add(r3, r3, r5)  # m += 1024
    label(KE)
    mov(r7, 0)
    cmp(r2, 0)
    bge(KPOS)
    neg(r2, r2)
    mov(r7, 1)
    label(KPOS)
    lsr(r5, r2, 10)
    mul(r5, r3)
    lsl(r2, r2, 22)
    lsr(r2, r2, 22)
    mul(r2, r3)
    lsr(r2, r2, 10)
    add(r2, r2, r5)  # aa
    mov(r5, r9)
    ldr(r3, [r5, 20])  # eq
    add(r4, r4, r3)
    mov(r3, 28)
    sub(r4, r3, r4)  # r
    ldr(r3, [r5, 16])  # B
    lsr(r0, r2, 11)
    mul(r0, r3)  # x
    lsl(r1, r2, 21)
    lsr(r1, r1, 21)
    mul(r1, r3)  # y
    cmp(r4, 11)
    blt(RLT11)
    mov(r3, r4)
    sub(r3, 11)
    lsr(r0, r3)  # x >> (r - 11)
    lsr(r1, r4)  # y >> r
    add(r5, r0, r1)
    b(USAT)
    label(RLT11)
    cmp(r4, 0)
    blt(RNEG)
    mov(r3, 18)
    add(r3, r3, r4)
    mov(r5, 1)
    lsl(r5, r3)
    cmp(r0, r5)
    bge(USATV)
    mov(r3, 11)
    sub(r3, r3, r4)
    lsl(r0, r3)
    lsr(r1, r4)
    add(r5, r0, r1)
    b(USAT)
    label(RNEG)
    mov(r3, 18)
    add(r3, r3, r4)
    blt(RBIG)  # r < -18
    mov(r5, 1)
    lsl(r5, r3)
    cmp(r0, r5)
    bge(RBIG)
    add(r3, 11)  # 29 + r
    mov(r5, 1)
    lsl(r5, r3)
    cmp(r1, r5)
    bge(RBIG)
    neg(r3, r4)  # -r
    lsl(r1, r3)
    add(r3, 11)
    lsl(r0, r3)
    add(r5, r0, r1)
    b(USAT)
    label(RBIG)
    mov(r5, 0)
    cmp(r2, 0)
    beq(USAT)  # aa == 0: u = 0
    label(USATV)
    mov(r5, 1)
    lsl(r5, r5, 29)
    sub(r5, r5, 1)  # SAT = 2**29 - 1 (kernels.plain.SAT)
    label(USAT)
    mov(r3, 1)
    lsl(r3, r3, 29)
    sub(r3, r3, 1)
    cmp(r5, r3)
    ble(UNEG)
    mov(r5, r3)
    label(UNEG)
    cmp(r7, 0)
    beq(USTORE)
    neg(r5, r5)
    label(USTORE)
    ldr(r4, [r6, 68])
    lsl(r3, r4, 2)
    ldr(r2, [r6, 84])
    add(r2, r2, r3)
    str(r5, [r2, 0])  # U[nt] = u
    ldr(r2, [r6, 60])
    cmp(r5, r2)
    ble(TMX)
    str(r5, [r6, 60])
    label(TMX)
    ldr(r2, [r6, 92])
    add(r2, r2, r3)
    ldr(r2, [r2, 0])  # b
    lsl(r2, r2, 1)
    ldr(r3, [r6, 12])  # vmeta
    add(r2, r2, r3)
    mov(r3, r8)
    add(r2, r2, r3)
    ldrb(r2, [r2, 1])
    lsl(r2, r2, 25)
    lsr(r2, r2, 27)
    bne(EVNZ)
    mov(r2, 1)
    label(EVNZ)
    ldr(r3, [r6, 64])
    cmp(r2, r3)
    ble(EVX)
    str(r2, [r6, 64])
    label(EVX)
    add(r4, 1)
    str(r4, [r6, 68])
    b(P1)
    label(P1DONE)
    ldr(r4, [r6, 68])
    cmp(r4, 0)
    bne(STATE)
    b(EXIT)
    label(STATE)
    ldr(r5, [r6, 76])
    add(r5, r5, r4)
    str(r5, [r6, 76])
    mov(r0, 0)  # sh
    mov(r1, 1)
    lsl(r1, r1, 14)  # corr = 16384
    ldr(r2, [r6, 64])
    ldr(r3, [r6, 48])  # evmax
    cmp(r2, r3)
    ble(SEV)
    sub(r0, r2, r3)  # sh = evt - evmax
    str(r2, [r6, 48])  # evmax = evt
    label(SEV)
    ldr(r2, [r6, 60])
    ldr(r3, [r6, 52])  # first
    cmp(r3, 0)
    beq(SNF)
    str(r2, [r6, 36])  # M = tmax
    mov(r3, 0)
    str(r3, [r6, 52])
    b(SRES)
    label(SNF)
    ldr(r3, [r6, 36])  # M
    cmp(r2, r3)
    ble(SRES)
    str(r2, [r6, 36])  # M = tmax
    sub(r2, r2, r3)  # d = tmax - M
    asr(r3, r2, 16)  # d >> 16
    cmp(r3, 15)
    blt(SCORR)
    mov(r1, 0)  # corr = 0
    b(SLS)
    label(SCORR)
    lsl(r4, r2, 16)
    lsr(r4, r4, 24)  # i = (d & 0xFFFF) >> 8
    lsl(r4, r4, 1)
    mov(r5, r12)
    add(r4, r4, r5)
    ldrh(r1, [r4, 0])  # t0
    ldrh(r5, [r4, 2])  # t1
    sub(r5, r1, r5)
    lsl(r4, r2, 24)
    lsr(r4, r4, 24)  # d & 255
    mul(r5, r4)
    asr(r5, r5, 8)
    sub(r1, r1, r5)
    asr(r1, r3)  # corr
    label(SLS)
    ldr(r2, [r6, 40])  # lsum
    lsr(r3, r2, 14)
    mul(r3, r1)
    lsl(r2, r2, 18)
    lsr(r2, r2, 18)
    mul(r2, r1)
    lsr(r2, r2, 14)
    add(r2, r2, r3)
    str(r2, [r6, 40])
    label(SRES)
    cmp(r0, 0)
    bne(RESC)
    mov(r2, 1)
    lsl(r2, r2, 14)
    cmp(r1, r2)
    bne(RESC)
    b(P2)
    label(RESC)
    mov(r2, r11)  # acc
    mov(r3, r9)
    ldr(r3, [r3, 4])  # D
    label(RESCL)
    ldr(r4, [r2, 0])
    asr(r4, r0)  # x >> sh
    mov(r7, 0)
    cmp(r4, 0)
    bge(RESP)
    neg(r4, r4)
    mov(r7, 1)
    label(RESP)
    lsr(r5, r4, 14)
    mul(r5, r1)
    lsl(r4, r4, 18)
    lsr(r4, r4, 18)
    mul(r4, r1)
    lsr(r4, r4, 14)
    add(r4, r4, r5)
    cmp(r7, 0)
    beq(RESS)
    neg(r4, r4)
    label(RESS)
    str(r4, [r2, 0])
    add(r2, 4)
    sub(r3, 1)
    bne(RESCL)
    label(P2)
    mov(r6, r10)
    mov(r0, 0)
    str(r0, [r6, 80])
    mov(r7, 0)  # jj
    label(P2L)
    ldr(r4, [r6, 68])
    cmp(r7, r4)
    blt(P2A)
    b(P3)
    label(P2A)
    lsl(r4, r7, 2)
    ldr(r2, [r6, 84])
    add(r2, r2, r4)
    ldr(r2, [r2, 0])  # u
    ldr(r3, [r6, 36])  # M
    sub(r2, r3, r2)  # d = M - u
    asr(r3, r2, 16)  # k
    mov(r0, 0)  # W
    cmp(r3, 15)
    bge(P2W)
    lsl(r4, r2, 16)
    lsr(r4, r4, 24)  # i
    lsl(r4, r4, 1)
    mov(r5, r12)
    add(r4, r4, r5)
    ldrh(r0, [r4, 0])  # t0
    ldrh(r5, [r4, 2])  # t1
    sub(r5, r0, r5)
    lsl(r4, r2, 24)
    lsr(r4, r4, 24)
    mul(r5, r4)
    asr(r5, r5, 8)
    sub(r0, r0, r5)
    ldr(r4, [r6, 44])  # ws
    add(r3, r3, r4)
    asr(r0, r3)  # w
    ldr(r4, [r6, 40])
    add(r4, r4, r0)
    str(r4, [r6, 40])  # lsum += w
    lsl(r4, r7, 2)
    ldr(r2, [r6, 92])
    add(r2, r2, r4)
    ldr(r2, [r2, 0])  # b
    lsl(r2, r2, 1)
    ldr(r3, [r6, 12])  # vmeta
    add(r2, r2, r3)
    mov(r3, r8)
    add(r2, r2, r3)
    ldrb(r3, [r2, 1])
    ldrb(r2, [r2, 0])
    lsl(r3, r3, 8)
    orr(r2, r3)  # h
    lsl(r3, r2, 22)
    lsr(r3, r3, 22)  # m
    lsl(r2, r2, 17)
    lsr(r2, r2, 27)  # e
    bne(VEN)
    mov(r2, 1)
    b(VE)
    label(VEN)
    mov(r5, 1)
    lsl(r5, r5, 10)
    add(r3, r3, r5)
    label(VE)
    mul(r0, r3)  # w * m
    ldr(r4, [r6, 48])  # evmax
    add(r4, 10)
    sub(r4, r4, r2)
    asr(r0, r4)  # W = (w * m) >> (10 + evmax - e)
    ldr(r4, [r6, 80])
    add(r4, r4, r0)
    str(r4, [r6, 80])
    label(P2W)
    lsl(r4, r7, 2)
    ldr(r2, [r6, 88])
    add(r2, r2, r4)
    str(r0, [r2, 0])  # W[jj]
    add(r7, 1)
    b(P2L)
    label(P3)
    mov(r7, 0)  # jj
    label(P3L)
    ldr(r4, [r6, 68])
    cmp(r7, r4)
    blt(P3A)
    b(P3E)
    label(P3A)
    lsl(r4, r7, 2)
    ldr(r2, [r6, 88])
    add(r2, r2, r4)
    ldr(r2, [r2, 0])  # W
    cmp(r2, 0)
    beq(P3N)
    ldr(r3, [r6, 92])
    add(r3, r3, r4)
    ldr(r3, [r3, 0])  # b
    ldr(r4, [r6, 16])  # prow
    mul(r3, r4)
    ldr(r4, [r6, 4])  # vbase
    add(r3, r3, r4)
    mov(r4, r8)
    add(r0, r3, r4)  # the V row
    mov(r1, r11)  # acc
    mov(r6, 0x80)
    mov(r3, r9)
    ldr(r3, [r3, 4])  # D
    lsr(r3, r3, 2)
    beq(P3R1)
    label(P3Q)
    ldrb(r4, [r0, 0])
    eor(r4, r6)
    mul(r4, r2)
    ldr(r5, [r1, 0])
    add(r5, r5, r4)
    str(r5, [r1, 0])
    ldrb(r4, [r0, 1])
    eor(r4, r6)
    mul(r4, r2)
    ldr(r5, [r1, 4])
    add(r5, r5, r4)
    str(r5, [r1, 4])
    ldrb(r4, [r0, 2])
    eor(r4, r6)
    mul(r4, r2)
    ldr(r5, [r1, 8])
    add(r5, r5, r4)
    str(r5, [r1, 8])
    ldrb(r4, [r0, 3])
    eor(r4, r6)
    mul(r4, r2)
    ldr(r5, [r1, 12])
    add(r5, r5, r4)
    str(r5, [r1, 12])
    add(r0, 4)
    add(r1, 16)
    sub(r3, 1)
    bne(P3Q)
    label(P3R1)
    mov(r3, r9)
    ldr(r3, [r3, 4])
    mov(r4, 3)
    and_(r3, r4)
    beq(P3RX)
    label(P3R)
    ldrb(r4, [r0, 0])
    eor(r4, r6)
    mul(r4, r2)
    ldr(r5, [r1, 0])
    add(r5, r5, r4)
    str(r5, [r1, 0])
    add(r0, 1)
    add(r1, 4)
    sub(r3, 1)
    bne(P3R)
    label(P3RX)
    mov(r6, r10)
    label(P3N)
    add(r7, 1)
    b(P3L)
    label(P3E)
    ldr(r0, [r6, 80])
    lsl(r0, r0, 7)
    mov(r1, r11)
    mov(r3, r9)
    ldr(r3, [r3, 4])
    mov(r2, 0)  # big
    label(P3C)
    ldr(r4, [r1, 0])
    sub(r4, r4, r0)
    str(r4, [r1, 0])
    bpl(P3CA)
    neg(r4, r4)
    label(P3CA)
    cmp(r4, r2)
    ble(P3CB)
    mov(r2, r4)
    label(P3CB)
    add(r1, 4)
    sub(r3, 1)
    bne(P3C)
    ldr(r0, [r6, 40])  # lsum
    cmp(r0, r2)
    ble(GUARD)
    mov(r2, r0)
    label(GUARD)
    mov(r3, 1)
    lsl(r3, r3, 28)  # LIM
    cmp(r2, r3)
    ble(TILEEND)
    mov(r1, r11)
    mov(r5, r9)
    ldr(r5, [r5, 4])
    label(GH)
    ldr(r4, [r1, 0])
    asr(r4, r4, 1)
    str(r4, [r1, 0])
    add(r1, 4)
    sub(r5, 1)
    bne(GH)
    lsr(r0, r0, 1)
    str(r0, [r6, 40])
    asr(r2, r2, 1)
    ldr(r4, [r6, 44])
    add(r4, 1)
    str(r4, [r6, 44])  # ws += 1
    b(GUARD)
    label(TILEEND)
    b(TILE)
    label(EXIT)
    ldr(r0, [r6, 76])
    pop({r4})
    mov(r12, r4)
    pop({r4, r5, r6, r7})
    mov(r8, r4)
    mov(r9, r5)
    mov(r10, r6)
    mov(r11, r7)


@micropython.asm_thumb
def att_div_q10(r0, r1, r2):
    # r0 acc, r1 out, r2 tile: out[QOFF + i] = acc[i] * 2**10 / LSUM, truncated toward zero, acc[i] = 0. Restoring
    # division one bit a step (the M0+ has no divide), a's bits shifted out of the top into the remainder by
    # lsl + adc; 30 bits of |a| < 2**30 and 10 more zero bits. r8 holds the dimensions left.
    mov(r4, r8)
    push({r4})
    ldr(r3, [r2, 4])  # D
    mov(r8, r3)
    ldr(r4, [r2, 8])  # QOFF
    lsl(r4, r4, 2)
    add(r1, r1, r4)
    ldr(r2, [r2, 48])  # LSUM
    label(DIM)
    ldr(r4, [r0, 0])
    mov(r5, 0)
    str(r5, [r0, 0])
    mov(r7, 0)
    cmp(r4, 0)
    bge(POS)
    neg(r4, r4)
    mov(r7, 1)
    label(POS)
    lsl(r4, r4, 2)  # bit 29 of |a| at bit 31
    mov(r5, 0)  # remainder
    mov(r6, 0)  # quotient
    mov(r3, 40)
    label(STEP)
    lsl(r4, r4, 1)
    adc(r5, r5)
    lsl(r6, r6, 1)
    cmp(r5, r2)
    bcc(NOSUB)
    sub(r5, r5, r2)
    add(r6, 1)
    label(NOSUB)
    sub(r3, 1)
    bne(STEP)
    cmp(r7, 0)
    beq(STORE)
    neg(r6, r6)
    label(STORE)
    str(r6, [r1, 0])
    add(r0, 4)
    add(r1, 4)
    mov(r3, r8)
    sub(r3, 1)
    mov(r8, r3)
    bne(DIM)
    pop({r4})
    mov(r8, r4)
    mov(r0, 0)


# On an Armv7-M core and up (the Cortex-M3, M7, the RP2350's M33) the division by hardware divide and the head's
# products by LDRSB.W and MLA: kernels.att_v7m_thumb's att_div_q10 and kernels.att_head_v7m_thumb's att_head_i8,
# absent or refused everywhere else (the RP2040 keeps the ones above). Not even tried on an Armv6-M firmware: the
# failed import alone cost the emulated Cortex-M0 ~18,000 instructions a token.
if __import__("kvedge.kernels").kernels.arch() >= 5:  # no new name in this module (kvedge.kernels.q8_asm_thumb)
    try:
        from kvedge.kernels.att_v7m_thumb import att_div_q10  # noqa: F811
        from kvedge.kernels.att_head_v7m_thumb import att_head_i8  # noqa: F811 (signed reads, MLA)
    except ImportError:
        pass
