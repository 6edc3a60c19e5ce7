# kvedge: the emulated board's RAM disk (kvedge_host.boards.m3board.write_disk_module puts it in the ROMFS image as
# _m3disk.mpy), littlefs2 in guest RAM outside the heap; survives soft resets. Reads and writes allocate
# nothing (a board's flash driver is C): no garbage between the objects an import or a test keeps, so the
# heap fragments no more than on a board. They copy a word at a time where buffer, disk offset and length allow
# (1.5 instructions a byte, Thumb-1: the Cortex-M0 runs it too), as a board's C driver copies from mapped flash;
# the viper byte loop this replaced took 36 a byte on the emulated Cortex-M3 and made every flash read in the
# figures (a tiered cache's cold blocks, streamed weights) cost more than the port's own driver would.
# Parameters (prepended by the host as MicroPython constants, folded into the bytecode): _ADDR, the disk's
# guest address; _BS, its block size; _N, its number of blocks.
import os
import uctypes
import vfs
import micropython


@micropython.asm_thumb
def _copy(r0, r1, r2, r3):  # a buffer, the disk's buffer, byte offset in the disk, bytes: n > 0 reads the disk
    add(r1, r1, r2)         # into the buffer, -n writes the buffer to the disk
    mov(r2, r3)
    cmp(r3, 0)
    bge(GO)
    neg(r2, r3)
    mov(r3, r0)  # swap: the disk is the destination
    mov(r0, r1)
    mov(r1, r3)
    label(GO)
    mov(r3, r0)  # words when destination, source and length are all multiples of 4
    orr(r3, r1)
    orr(r3, r2)
    mov(r4, 3)
    and_(r3, r4)
    bne(BYTES)
    label(WORDS)
    cmp(r2, 0)
    beq(END)
    ldr(r3, [r1, 0])
    str(r3, [r0, 0])
    add(r0, 4)
    add(r1, 4)
    sub(r2, 4)
    b(WORDS)
    label(BYTES)
    cmp(r2, 0)
    beq(END)
    ldrb(r3, [r1, 0])
    strb(r3, [r0, 0])
    add(r0, 1)
    add(r1, 1)
    sub(r2, 1)
    b(BYTES)
    label(END)
    mov(r0, 0)  # returns r0 as an int: an address above 2**30 (the M7's disk) would be a long int, allocated


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
