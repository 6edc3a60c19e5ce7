# kvedge: prepended to code run in a fresh session on the emulated Cortex-M0 (kvedge_host.m3board.M0), whose
# firmware has no vfs.rom_ioctl: the ROMFS slot in its flash mounted at /rom, and /rom and /rom/lib on sys.path,
# as the Cortex-M3's firmware does at every reset.
# Parameters (prepended by the host): ADDR, the slot's address in flash; SIZE, its bytes.
import vfs as _v, uctypes as _u, sys as _s
if '/rom' not in _s.path:
    _v.mount(_v.VfsRom(_u.bytearray_at(ADDR, SIZE)), '/rom')
    _s.path.extend(('/rom', '/rom/lib'))
del _v, _u, _s, ADDR, SIZE
