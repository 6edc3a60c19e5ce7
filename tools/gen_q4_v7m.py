#!/usr/bin/env python3
"""Write device/kvedge/kernels/q4_v7m_thumb.py: q_mv4 (int4 rows, kernels.q4_plain's arithmetic) in Thumb-2 for
the Armv7-M cores (the Cortex-M3, and every core above it), assembled here from the listing below.

MicroPython's inline assembler has mnemonics for Thumb-1 only (SBFX, MLA, LDM.W and the wide branches are not
among them), so the routine is written as raw halfwords: `data(2, ...)`, each with its instruction beside it. This
tool is the assembler: a few Thumb and Thumb-2 forms, labels resolved in two passes, every branch's range checked.
Edit LISTING and run it (`--check`: exit 1 when the module is not what the listing gives;
tests/host/test_q4_v7m_gen.py runs that, and cross-checks each encoding with llvm-mc where it is installed).

What a group of 32 products costs (instructions, as qemu -icount counts them): 2 LDM.W of two code words each,
4 LDM.W of eight x codes each, 32 x (SBFX + MLA), the first MLA a MUL; then the group's scale: LDM.W of the four
frame words it needs (the row's sum, the scale pointer, EG, x's end: no register is left for them beside eight x
codes), LDRH.W (post-indexed), UBFX, LSRS, BEQ (a subnormal: out of line), ADDS, MULS, SUB.W, ASRS, ADD, STM.W,
CMP, BNE.W: 83 a group, 2.59 a MAC; a row's own work ~31 (SSAT, CBZ, IT). Thumb-1 (kernels.q4_asm_thumb) takes 5
a product (LSL, ASR, LDR, MUL, ADD) and 183 a group."""
import os
import re
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
OUT = os.path.join(ROOT, "device", "kvedge", "kernels", "q4_v7m_thumb.py")

# The stack frame below the saved r8-r12 (sp-relative byte offsets): the group loop's four words first (one LDM.W
# reads them, one STM.W writes the two it changes), then what a row reads
S, SCP, EG, XEND, XSTART, XM, OS, ADD, OUTP, OUTEND, BIG = 0, 4, 8, 12, 16, 20, 24, 28, 32, 36, 40
FRAME = 48


def _group():
    """One group: 32 products (two LDM.W of two code words, four LDM.W of eight x), then its scale."""
    out = []
    for half in range(2):
        out.append("ldm.w r0!, {r3, lr}")  # two words of eight nibbles each (16 products)
        for reg in ("r3", "lr"):
            out.append("ldm.w r1!, {r4, r5, r6, r7, r8, r9, r10, r11}")
            for j in range(8):
                out.append("sbfx r12, %s, #%d, #4" % (reg, 4 * j))
                if half == 0 and reg == "r3" and j == 0:
                    out.append("mul.w r2, r12, r4")  # the group's sum starts with its first product
                else:
                    out.append("mla r2, r12, r%d, r2" % (4 + j))
    return out


def _finish(tag, row):
    """A row's value t (r2) added into out (the residual connection) or stored, clamped to +-VMAX, the largest |t|
    kept; then the next row (label `row`) until out's end. `tag` keeps the labels apart."""
    return [
        "CLAMP%s:" % tag,
        "ldr r4, [sp, #%d]" % ADD,
        "ldr r3, [sp, #%d]" % OUTP,
        "cbz r4, CL%s" % tag,
        "ldr r4, [r3, #0]",
        "adds r2, r2, r4",
        "CL%s:" % tag,
        "ssat r2, #30, r2",  # -2**29 .. VMAX
        "cmp.w r2, #0xE0000000",
        "it eq",
        "addeq r2, #1",  # -VMAX
        "stm r3!, {r2}",
        "str r3, [sp, #%d]" % OUTP,
        "eor.w r4, r2, r2, asr #31",
        "sub.w r4, r4, r2, asr #31",  # |t|
        "ldr r5, [sp, #%d]" % BIG,
        "cmp r4, r5",
        "it gt",
        "strgt r4, [sp, #%d]" % BIG,
        "ldr r5, [sp, #%d]" % OUTEND,
        "cmp r3, r5",
        "bne.w %s" % row,
    ]


LISTING = [
    # r0 w, r1 x (int32 codes), r2 out (int32), r3 p (P_WO 0, P_ROWS 1, P_COLS 2, P_XM 3, P_OS 4, P_ADD 5, P_RO 6,
    # P4_SO 7, P4_EG 8). MicroPython's own entry saves r4-r7 and lr; r8-r12 are saved here.
    # In the group loop: r0 the codes (rows and groups in file order: one pointer for the matrix), r1 x, r2 the
    # group's sum d, r3 and lr code words, r4-r11 eight x codes, r12 a nibble; in its scale step r8 the row's sum
    # s, r9 the next f16 scale (one pointer for the matrix too), r10 EG, r11 x + cols, read from the frame.
    "push.w {r8, r9, r10, r11, r12}",
    "sub sp, #%d" % FRAME,
    "movs r4, #0",
    "str r4, [sp, #%d]" % BIG,
    "ldr r4, [r3, #4]",  # rows
    "cmp r4, #0",
    "ble.w EXIT",
    "ldr r5, [r3, #24]",  # ro
    "lsls r5, r5, #2",
    "adds r5, r2, r5",
    "str r5, [sp, #%d]" % OUTP,  # out + ro
    "lsls r4, r4, #2",
    "adds r4, r5, r4",
    "str r4, [sp, #%d]" % OUTEND,  # out + ro + rows
    "ldr r4, [r3, #12]",
    "str r4, [sp, #%d]" % XM,
    "ldr r4, [r3, #16]",  # os, a right shift of at most 31
    "cmp r4, #31",
    "ble OSOK",
    "movs r4, #31",
    "OSOK:",
    "str r4, [sp, #%d]" % OS,
    "ldr r4, [r3, #20]",
    "str r4, [sp, #%d]" % ADD,
    "str r1, [sp, #%d]" % XSTART,
    "ldr r4, [r3, #32]",
    "str r4, [sp, #%d]" % EG,
    "ldr r4, [r3, #28]",
    "adds r4, r0, r4",
    "str r4, [sp, #%d]" % SCP,  # w + so: the first f16 scale
    "ldr r5, [r3, #0]",
    "adds r0, r0, r5",  # w + wo: the first codes
    "ldr r4, [r3, #8]",  # cols: whole groups of 32 (q4_plain reads cols >> 5 of them)
    "lsrs r4, r4, #5",
    "lsls r4, r4, #7",
    "adds r4, r1, r4",
    "str r4, [sp, #%d]" % XEND,  # x + 32 * groups
    "cmp r4, r1",
    "beq.w ZROW",  # no columns: every row's sum is 0
    "ROW:",
    "ldr r1, [sp, #%d]" % XSTART,
    "movs r4, #0",
    "str r4, [sp, #%d]" % S,
    "GROUP:",
] + _group() + [
    "ldm.w sp, {r8, r9, r10, r11}",  # s, the scale pointer, EG, x + cols
    "ldrh.w r4, [r9], #2",  # h, the group's f16 scale
    "ubfx r5, r4, #3, #7",  # (h & 1023) >> 3
    "lsrs r4, r4, #10",  # its exponent field k
    "beq SUBN",
    "adds r5, #128",  # (m | 1024) >> 3
    "BACK:",
    "muls r2, r5, r2",
    "sub.w r4, r10, r4",  # EG - k, 0..30
    "asrs r2, r4",
    "add r8, r2",  # s += (d * (m >> 3)) >> (EG - k)
    "stm.w sp, {r8, r9}",
    "cmp r1, r11",
    "bne.w GROUP",
    # the row's value: s * xm / 2**15 (floor), then os
    "ldr r3, [sp, #%d]" % XM,
    "asr.w r5, r8, #15",
    "muls r5, r3, r5",
    "ubfx r4, r8, #0, #15",
    "muls r4, r3, r4",
    "add.w r2, r5, r4, lsr #15",
    "ldr r6, [sp, #%d]" % OS,
    "cmp r6, #0",
    "blt LEFT",
    "asrs r2, r6",
] + _finish("", "ROW") + [
    "b EXIT",
    "SUBN:",  # a subnormal scale: its fraction, no implicit bit, exponent field 1
    "movs r4, #1",
    "b BACK",
    "LEFT:",  # a left shift by n = -os, saturating at +-VMAX
    "negs r6, r6",
    "cmp r6, #30",
    "bge SATZ",
    "mvn.w r4, #0xE0000000",  # VMAX
    "asrs r4, r6",  # VMAX >> n
    "cmp r2, r4",
    "bgt SATP",
    "negs r5, r4",
    "cmp r2, r5",
    "blt SATN",
    "lsls r2, r6",
    "b CLAMP",
    "SATZ:",
    "cmp r2, #0",
    "bgt SATP",
    "blt SATN",
    "b CLAMP",
    "SATP:",
    "mvn.w r2, #0xE0000000",
    "b CLAMP",
    "SATN:",
    "mvn.w r2, #0xE0000000",
    "negs r2, r2",
    "b CLAMP",
    "ZROW:",  # no columns: t = 0 whatever os, then as any row
    "movs r2, #0",
] + _finish("Z", "ZROW") + [
    "EXIT:",
    "ldr r0, [sp, #%d]" % BIG,  # the largest |out| written
    "add sp, #%d" % FRAME,
    "pop.w {r8, r9, r10, r11, r12}",
]

COND = {"eq": 0, "ne": 1, "cs": 2, "cc": 3, "mi": 4, "pl": 5, "vs": 6, "vc": 7, "hi": 8, "ls": 9, "ge": 10,
        "lt": 11, "gt": 12, "le": 13}


class AsmError(Exception):
    pass


def _reg(s):
    s = s.strip()
    named = {"sp": 13, "lr": 14, "pc": 15}
    if s in named:
        return named[s]
    m = re.fullmatch(r"r(\d+)", s)
    if not m or int(m.group(1)) > 15:
        raise AsmError("not a register: %r" % s)
    return int(m.group(1))


def _imm(s):
    s = s.strip()
    if not s.startswith("#"):
        raise AsmError("not an immediate: %r" % s)
    return int(s[1:], 0)


def _low(*regs):
    for r in regs:
        if r > 7:
            raise AsmError("r%d: a 16-bit form takes r0-r7 only" % r)


def _reglist(s):
    m = re.fullmatch(r"\{(.*)\}", s.strip())
    if not m:
        raise AsmError("not a register list: %r" % s)
    mask = 0
    for part in m.group(1).split(","):
        mask |= 1 << _reg(part)
    return mask


def _modimm(v):
    """Thumb-2's modified immediate (i:imm3:imm8) of a 32-bit value, or AsmError."""
    v &= 0xFFFFFFFF
    if v < 256:
        return v
    for rot in range(8, 32):
        x = ((v << rot) | (v >> (32 - rot))) & 0xFFFFFFFF  # v rotated left: the 8-bit value rotated right by rot
        if 128 <= x < 256:
            return (rot << 7) | (x & 127)
    raise AsmError("not a Thumb-2 modified immediate: %#x" % v)


def _split(args):
    """Arguments split at top-level commas ([...] and {...} kept whole)."""
    out, depth, cur = [], 0, ""
    for ch in args:
        if ch in "[{":
            depth += 1
        elif ch in "]}":
            depth -= 1
        if ch == "," and depth == 0:
            out.append(cur.strip())
            cur = ""
        else:
            cur += ch
    if cur.strip():
        out.append(cur.strip())
    return out


def size(line):
    """Bytes of an instruction line (2 or 4): known before its operands are resolved."""
    op = line.split()[0]
    if op.endswith(".w") or op in ("sbfx", "ubfx", "mla", "ssat"):
        return 4
    return 2


def encode(line, addr=0, labels=None):
    """The halfwords of one instruction at byte address addr (branches: labels' addresses)."""
    op, _, rest = line.strip().partition(" ")
    a = _split(rest)

    def target():
        if labels is None:
            return addr + 4
        if a[-1] not in labels:
            raise AsmError("no label %s" % a[-1])
        return labels[a[-1]]

    if op in ("push.w", "pop.w"):
        mask = _reglist(a[0])
        return [0xE92D, mask] if op == "push.w" else [0xE8BD, mask]
    if op in ("sub", "add") and a[0] == "sp":
        v = _imm(a[1])
        if v % 4 or not 0 <= v < 512:
            raise AsmError(line)
        return [(0xB080 if op == "sub" else 0xB000) | (v >> 2)]
    if op in ("ldr", "str"):
        t = _reg(a[0])
        m = re.fullmatch(r"\[\s*(\w+)\s*,\s*(#[-\w]+)\s*\]", a[1])
        if not m:
            raise AsmError(line)
        n, v = _reg(m.group(1)), _imm(m.group(2))
        _low(t)
        if n == 13:
            if v % 4 or not 0 <= v < 1024:
                raise AsmError(line)
            return [(0x9800 if op == "ldr" else 0x9000) | (t << 8) | (v >> 2)]
        _low(n)
        if v % 4 or not 0 <= v < 128:
            raise AsmError(line)
        return [(0x6800 if op == "ldr" else 0x6000) | ((v >> 2) << 6) | (n << 3) | t]
    if op == "ldrh.w":  # post-indexed: ldrh.w rt, [rn], #imm8
        t = _reg(a[0])
        m = re.fullmatch(r"\[\s*(\w+)\s*\]", a[1])
        v = _imm(a[2])
        if not m or not 0 <= v < 256:
            raise AsmError(line)
        return [0xF830 | _reg(m.group(1)), (t << 12) | 0x0B00 | v]
    if op == "movs":
        d, v = _reg(a[0]), _imm(a[1])
        _low(d)
        if not 0 <= v < 256:
            raise AsmError(line)
        return [0x2000 | (d << 8) | v]
    if op == "mov":
        d, m_ = _reg(a[0]), _reg(a[1])
        return [0x4600 | ((d >> 3) << 7) | (m_ << 3) | (d & 7)]
    if op in ("mov.w", "mvn.w"):
        d, v = _reg(a[0]), _modimm(_imm(a[1]))
        hw1 = (0xF04F if op == "mov.w" else 0xF06F) | ((v >> 11) << 10)
        return [hw1, (((v >> 8) & 7) << 12) | (d << 8) | (v & 255)]
    if op in ("lsls", "lsrs", "asrs") and len(a) == 3:
        d, m_, v = _reg(a[0]), _reg(a[1]), _imm(a[2])
        _low(d, m_)
        if not 0 < v < 32:
            raise AsmError(line)
        base = {"lsls": 0x0000, "lsrs": 0x0800, "asrs": 0x1000}[op]
        return [base | (v << 6) | (m_ << 3) | d]
    if op in ("lsls", "lsrs", "asrs") and len(a) == 2:
        d, m_ = _reg(a[0]), _reg(a[1])
        _low(d, m_)
        base = {"lsls": 0x4080, "lsrs": 0x40C0, "asrs": 0x4100}[op]
        return [base | (m_ << 3) | d]
    if op in ("adds", "subs") and len(a) == 3:
        d, n, m_ = _reg(a[0]), _reg(a[1]), _reg(a[2])
        _low(d, n, m_)
        return [(0x1800 if op == "adds" else 0x1A00) | (m_ << 6) | (n << 3) | d]
    if op in ("adds", "subs") and len(a) == 2:
        d, v = _reg(a[0]), _imm(a[1])
        _low(d)
        if not 0 <= v < 256:
            raise AsmError(line)
        return [(0x3000 if op == "adds" else 0x3800) | (d << 8) | v]
    if op == "add":  # add rdn, rm: any registers, flags untouched
        d, m_ = _reg(a[0]), _reg(a[1])
        return [0x4400 | ((d >> 3) << 7) | (m_ << 3) | (d & 7)]
    if op == "muls":  # muls rdm, rn, rdm
        d, n, m_ = _reg(a[0]), _reg(a[1]), _reg(a[2])
        _low(d, n)
        if m_ != d:
            raise AsmError("muls: the 16-bit form's last operand is its destination: " + line)
        return [0x4340 | (n << 3) | d]
    if op == "negs":
        d, m_ = _reg(a[0]), _reg(a[1])
        _low(d, m_)
        return [0x4240 | (m_ << 3) | d]
    if op == "cmp":
        n = _reg(a[0])
        if a[1].startswith("#"):
            v = _imm(a[1])
            _low(n)
            if not 0 <= v < 256:
                raise AsmError(line)
            return [0x2800 | (n << 8) | v]
        m_ = _reg(a[1])
        if n < 8 and m_ < 8:
            return [0x4280 | (m_ << 3) | n]
        return [0x4500 | ((n >> 3) << 7) | (m_ << 3) | (n & 7)]
    if op in ("ldm", "stm"):  # 16-bit, with writeback: ldm rn!, {low registers}
        n = _reg(a[0].rstrip("!"))
        mask = _reglist(a[1])
        _low(n)
        if mask > 255 or not a[0].endswith("!") or (op == "ldm" and mask >> n & 1):
            raise AsmError(line)
        return [(0xC800 if op == "ldm" else 0xC000) | (n << 8) | mask]
    if op in ("ldm.w", "stm.w"):  # with writeback (rn!) or without
        wb = a[0].endswith("!")
        n = _reg(a[0].rstrip("!"))
        mask = _reglist(a[1])
        if (wb and mask >> n & 1) or mask & (0xA000 if op == "ldm.w" else 0xE000) or bin(mask).count("1") < 2:
            raise AsmError(line)
        return [(0xE890 if op == "ldm.w" else 0xE880) | (wb << 5) | n, mask]
    if op == "it":
        c = COND[a[0]]
        return [0xBF08 | (c << 4)]
    if op in ("addeq", "strgt"):  # the 16-bit forms, conditional inside an IT block
        return encode(("adds " if op == "addeq" else "str ") + rest, addr, labels)
    if op == "cbz":
        n = _reg(a[0])
        _low(n)
        a = a[1:]
        off = target() - (addr + 4)
        if off % 2 or not 0 <= off <= 126:
            raise AsmError("branch out of range (%d): %s" % (off, line))
        return [0xB100 | ((off >> 6) << 9) | (((off >> 1) & 31) << 3) | n]
    if op == "ssat":
        d, v, n = _reg(a[0]), _imm(a[1]), _reg(a[2])
        if not 1 <= v <= 32:
            raise AsmError(line)
        return [0xF300 | n, (d << 8) | (v - 1)]
    if op == "cmp.w":
        n, v = _reg(a[0]), _modimm(_imm(a[1]))
        return [0xF1B0 | ((v >> 11) << 10) | n, (((v >> 8) & 7) << 12) | 0x0F00 | (v & 255)]
    if op in ("eor.w", "sub.w", "add.w", "asr.w") and (len(a) == 4 or op == "asr.w"):
        # data processing with a shifted register: rd, rn, rm, <lsl|lsr|asr> #n (asr.w rd, rm, #n: mov.w's form)
        if op == "asr.w":
            d, n, m_, kind, v = _reg(a[0]), 15, _reg(a[1]), "asr", _imm(a[2])
        else:
            d, n, m_ = _reg(a[0]), _reg(a[1]), _reg(a[2])
            kind, v = a[3].split()
            v = _imm(v)
        if not 0 < v < 32:
            raise AsmError(line)
        hw1 = {"eor.w": 0xEA80, "sub.w": 0xEBA0, "add.w": 0xEB00, "asr.w": 0xEA40}[op] | n
        t = {"lsl": 0, "lsr": 1, "asr": 2}[kind]
        return [hw1, ((v >> 2) << 12) | (d << 8) | ((v & 3) << 6) | (t << 4) | m_]
    if op in ("sbfx", "ubfx"):
        d, n, lsb, w = _reg(a[0]), _reg(a[1]), _imm(a[2]), _imm(a[3])
        if not (0 <= lsb < 32 and 1 <= w <= 32 - lsb):
            raise AsmError(line)
        return [(0xF340 if op == "sbfx" else 0xF3C0) | n, ((lsb >> 2) << 12) | (d << 8) | ((lsb & 3) << 6) | (w - 1)]
    if op == "mul.w":
        d, n, m_ = _reg(a[0]), _reg(a[1]), _reg(a[2])
        return [0xFB00 | n, 0xF000 | (d << 8) | m_]
    if op == "mla":
        d, n, m_, acc = _reg(a[0]), _reg(a[1]), _reg(a[2]), _reg(a[3])
        return [0xFB00 | n, (acc << 12) | (d << 8) | m_]
    if op == "sub.w" and len(a) == 3:
        d, n, m_ = _reg(a[0]), _reg(a[1]), _reg(a[2])
        return [0xEBA0 | n, (d << 8) | m_]
    if op == "b":
        off = target() - (addr + 4)
        if off % 2 or not -2048 <= off <= 2046:
            raise AsmError("branch out of range (%d): %s" % (off, line))
        return [0xE000 | ((off >> 1) & 0x7FF)]
    m = re.fullmatch(r"b(\w\w)(\.w)?", op)
    if m and m.group(1) in COND:
        c = COND[m.group(1)]
        off = target() - (addr + 4)
        if m.group(2) is None:
            if off % 2 or not -256 <= off <= 254:
                raise AsmError("branch out of range (%d): %s" % (off, line))
            return [0xD000 | (c << 8) | ((off >> 1) & 0xFF)]
        if off % 2 or not -(1 << 20) <= off < (1 << 20):
            raise AsmError("branch out of range (%d): %s" % (off, line))
        v = off & 0x1FFFFF
        s, j2, j1 = v >> 20 & 1, v >> 19 & 1, v >> 18 & 1
        return [0xF000 | (s << 10) | (c << 6) | (v >> 12 & 63), 0x8000 | (j1 << 13) | (j2 << 11) | (v >> 1 & 0x7FF)]
    raise AsmError("no encoding for %r" % line)


def assemble(listing):
    """[(line, halfwords)] for a listing of instructions and LABEL: lines."""
    labels, at = {}, 0
    for line in listing:
        if line.endswith(":"):
            if line[:-1] in labels:
                raise AsmError("label %s twice" % line)
            labels[line[:-1]] = at
        else:
            at += size(line)
    out, at = [], 0
    for line in listing:
        if line.endswith(":"):
            out.append((line, None))
            continue
        hws = encode(line, at, labels)
        if 2 * len(hws) != size(line):
            raise AsmError("size of %r" % line)
        out.append((line, hws))
        at += size(line)
    return out


HEADER = '''# GENERATED by tools/gen_q4_v7m.py from its listing: edit that and run the tool.
# kernels.q4_asm_thumb's q_mv4 (int4 rows; kernels.q4_plain has the arithmetic) for the Armv7-M cores (the Cortex-M3;
# the cores above it run it too): a product is SBFX (the nibble sign-extended in one instruction) and MLA, eight x
# codes come in one LDM.W and two code words of eight nibbles in another, where Thumb-1 takes LSL, ASR, LDR, MUL
# and ADD a product. MicroPython's inline assembler has no mnemonic for most of these, so every instruction is a raw
# encoding with its assembly beside it. 83 instructions a group of 32 products (Thumb-1: 183), plus ~31 a row.
# q4_asm_thumb takes it where it loads: on a core that runs Thumb-2 (kvedge.kernels.cpuid.has_thumb2()); deploy
# sends it to armv7m boards and up. Same integers as kernels.q4_plain. The codes are read a word at a time: w + p[0]
# must be a multiple of 4 (LDM faults otherwise, as q4_asm_thumb's LDR does on the M0+), the scales a halfword.
import micropython
from kvedge.kernels.cpuid import has_thumb2

if not has_thumb2():  # before anything is defined: an Armv6-M core (the RP2040's M0+) would fault on them
    raise ImportError("no Thumb-2 instructions on this core (kvedge.kernels.cpuid)")

OK = True


@micropython.asm_thumb
def q_mv4(r0, r1, r2, r3):
'''


def render():
    text = HEADER
    for line, hws in assemble(LISTING):
        if hws is None:
            text += "    # %s\n" % line
        else:
            text += "    data(2, %s)  # %s\n" % (", ".join("0x%04X" % h for h in hws), line)
    return text


def main(argv):
    text = render()
    if "--check" in argv:
        with open(OUT) as f:
            return 0 if f.read() == text else 1
    with open(OUT, "w") as f:
        f.write(text)
    print("wrote %s" % OUT)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
