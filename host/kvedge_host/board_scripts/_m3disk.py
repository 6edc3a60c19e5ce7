# kvedge: the emulated board's RAM disk (kvedge_host.m3board.write_disk_module puts it in the ROMFS image as
# _m3disk.mpy), littlefs2 in guest RAM outside the heap; survives soft resets. Reads and writes allocate
# nothing (a board's flash driver is C): no garbage between the objects an import or a test keeps, so the
# heap fragments no more than on a board.
# Parameters (prepended by the host as MicroPython constants, folded into the bytecode): _ADDR, the disk's
# guest address; _BS, its block size; _N, its number of blocks.
import os
import uctypes
import vfs
import micropython


@micropython.viper
def _get(dst, src, soff: int, n: int):
    d = ptr8(dst)
    s = ptr8(src)
    i = 0
    while i < n:
        d[i] = s[soff + i]
        i += 1


@micropython.viper
def _put(dst, doff: int, src, n: int):
    d = ptr8(dst)
    s = ptr8(src)
    i = 0
    while i < n:
        d[doff + i] = s[i]
        i += 1


class RamDisk:
    def __init__(self, addr, bs, n):
        self.bs = bs
        self.n = n
        self.mem = uctypes.bytearray_at(addr, bs * n)

    def readblocks(self, block, buf, off=0):  # viper copies: no slice objects, nothing allocated
        _get(buf, self.mem, block * self.bs + off, len(buf))

    def writeblocks(self, block, buf, off=0):
        _put(self.mem, block * self.bs + off, buf, len(buf))

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
