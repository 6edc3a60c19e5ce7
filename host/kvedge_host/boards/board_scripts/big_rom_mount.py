# kvedge: prepended to code run in a fresh session on an emulated board whose ROMFS image is larger than its
# firmware's partition (kvedge_host.boards.m3machines.big_rom: a 15M-class model's int4 weights on the Cortex-M7 or
# the Xtensa stand-in): the image, loaded by qemu where the machine has spare RAM, mounted at /rom in place of
# whatever the firmware mounted from its own 4 MiB partition, and /rom and /rom/lib on sys.path. Files are read in
# place as from the firmware's partition (a VfsRom over the guest's memory). It binds no name (see m0_rom_mount).
# Parameters (prepended by the host as const()): _ADDR, the image's guest address; _SIZE, the slot's bytes.
try:
    __import__('vfs').umount('/rom')
except OSError:
    pass
__import__('vfs').mount(__import__('vfs').VfsRom(__import__('uctypes').bytearray_at(_ADDR, _SIZE)), '/rom')
if '/rom' not in __import__('sys').path:
    __import__('sys').path.extend(('/rom', '/rom/lib'))
