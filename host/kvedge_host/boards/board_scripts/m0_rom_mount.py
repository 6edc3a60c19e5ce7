# kvedge: prepended to code run in a fresh session on the emulated Cortex-M0 (kvedge_host.boards.m3board.M0), whose
# firmware has no vfs.rom_ioctl: the ROMFS slot in its flash mounted at /rom, and /rom and /rom/lib on sys.path,
# as the Cortex-M3's firmware does at every reset. It binds no name: a global a session's code binds keeps its
# slot in __main__'s dict for the whole session (binding and deleting four names left 32 bytes more).
# Parameters (prepended by the host as const()): _ADDR, the slot's address in flash; _SIZE, its bytes.
if '/rom' not in __import__('sys').path:
    __import__('vfs').mount(__import__('vfs').VfsRom(__import__('uctypes').bytearray_at(_ADDR, _SIZE)), '/rom')
    __import__('sys').path.extend(('/rom', '/rom/lib'))
