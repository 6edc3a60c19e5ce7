# kvedge: the emulated Xtensa board's RAM disk (kvedge_host.boards.m3board.XT: write_disk_module puts it in the
# ROMFS image as _m3disk.mpy, the name the session's mount code imports): _m3disk.py's littlefs2 in guest RAM
# outside the heap with the copy in viper, which the Xtensa stand-in compiles to xtensa (call0) code (asm_thumb is
# Arm only). Reads and writes allocate nothing; they copy a word at a time where buffer, disk offset and length
# are all multiples of 4 (an unaligned 32-bit access is a CPU exception on the lx106), else a byte at a time.
# Parameters (prepended by the host as MicroPython constants, folded into the bytecode): _ADDR, the disk's
# guest address; _BS, its block size; _N, its number of blocks.
import os
import uctypes
import vfs
import micropython


@micropython.viper
def _copy(buf, mem, off: int, n: int):  # n > 0 reads the disk at byte offset off into buf, -n writes buf there
    a = uint(ptr8(buf))                # the source
    d = uint(ptr8(mem)) + uint(off)    # the destination
    if n < 0:
        n = 0 - n
    else:                              # a read: the disk is the source
        s = d
        d = a
        a = s
    if ((int(a | d) | n) & 3) == 0:
        src = ptr32(a)
        dst = ptr32(d)
        i = 0
        w = n >> 2
        while i < w:
            dst[i] = src[i]
            i += 1
    else:
        sb = ptr8(a)
        db = ptr8(d)
        i = 0
        while i < n:
            db[i] = sb[i]
            i += 1


class RamDisk:
    def __init__(self, addr, bs, n):
        self.bs = bs
        self.n = n
        self.mem = uctypes.bytearray_at(addr, bs * n)

    def readblocks(self, block, buf, off=0):  # viper copies: no slice objects, nothing allocated
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
