"""The emulated machines (qemu) that stand for boards: a Layout says where each keeps its firmware images, its
ROMFS slot and its RAM disk, which -march values its firmware loads and what a fresh session runs first (the
mounts); M3 (mps2-an385), M0 (microbit), M7 (mps2-an500), M55 (mps3-an547) and the Cortex-M3 with its heap in
PSRAM (M3P4, M3P8). Also the RAM disk's board-side code (board_scripts/_m3disk.py with the machine's disk address
and geometry). The board itself: kvedge_host.boards.m3board."""
import re

from . import board_scripts
from .m3faults import FAULT, XT_FAULT

DISK_BLOCK = 4096            # a flash sector, as littlefs is used on rp2 and esp32 boards
DISK_BLOCKS = 3072           # 12 MiB


class Layout:
    """One emulated machine: its firmware images, qemu options and where its ROMFS image and RAM disk live.

    key: the runtime's name; cpu: what it stands for in messages; firmware_env / firmware_sub: the folder of
    the images ($ENV, else SHARED_RUNTIMES/sub); image: their file names (the heap in group 1); qemu_args:
    options after -machine; romfs_addr/romfs_max: the ROMFS slot; disk_addr: the RAM disk (disk_blocks of
    DISK_BLOCK bytes, zero at power-on, outside the heap); marches: the -march values its firmware loads, the
    first the default; rom_mount: session code that mounts the ROMFS at /rom when the firmware does not;
    psram_bytes: the size of a RAM that a host file can back (disk_image), 0 when the machine has none;
    qemu: the qemu binary and the Debian package that has it; fault: what the firmware prints on a CPU
    exception; disk_script: the board script of its RAM disk (sent as DISK_NAME); stands_for: the profile
    -march values whose code it runs in its own -march's place (the ESP32s' xtensawin on the lx106)."""

    def __init__(self, key, cpu, machine, firmware_env, firmware_sub, image, romfs_addr, romfs_max, disk_addr,
                 marches, image_name, qemu_args=(), rom_mount="", psram_bytes=0, disk_blocks=DISK_BLOCKS,
                 qemu=("qemu-system-arm", "qemu-system-arm"), fault=None, disk_script=None, stands_for=()):
        self.key, self.cpu, self.machine, self.image_name = key, cpu, machine, image_name
        self.qemu, self.fault = qemu, fault or FAULT
        self.disk_script, self.stands_for = disk_script or DISK_NAME, tuple(stands_for)
        self.firmware_env, self.firmware_sub, self.image = firmware_env, firmware_sub, re.compile(image)
        self.romfs_addr, self.romfs_max, self.disk_addr = romfs_addr, romfs_max, disk_addr
        self.marches, self.qemu_args, self.psram_bytes = tuple(marches), list(qemu_args), psram_bytes
        self.disk_blocks = disk_blocks
        # code run at the start of a fresh session: /rom (where the firmware does not mount it), then the RAM
        # disk at / (its module from /rom when the image has it)
        self.mount = rom_mount + board_scripts.source("m3_mount")

    def __repr__(self):
        return "Layout(%s)" % self.key


DISK_NAME = "_m3disk"
# the Cortex-M3: the firmware mounts a ROMFS image found at 0x21000000 (4 MiB slot) at /rom at every reset;
# the RAM disk is PSRAM after the ROMFS slot, up to 0x21FFFFFF (qemu's "main RAM" of mps2-an385)
M3 = Layout("m3", "Cortex-M3", "mps2-an385", "KVEDGE_M3_FIRMWARE", "micropython-cortex-m3",
            r"^firmware-heap(\d+)\.elf$", romfs_addr=0x21000000, romfs_max=0x400000, disk_addr=0x21400000,
            marches=("armv6m", "armv7m", "armv7em"), image_name="firmware-heapN.elf", psram_bytes=16 * 1024 * 1024)
# the Cortex-M0 (microbit machine, nRF51): flash at 0 (the firmware's ~213 KB of text; qemu's flash raised to
# 5 MiB so the 4 MiB ROMFS slot sits at 1 MiB, in flash as on an RP2040, read and executed in place) and SRAM at
# 0x20000000 (.data, .bss with the heap, the stack down from 0x20040000, as the firmware was linked; raised to
# 16 MiB so the RAM disk fits at 0x20100000, above everything the firmware uses). The firmware has no
# vfs.rom_ioctl: the session code mounts the slot itself (vfs.VfsRom over the flash) and puts /rom and /rom/lib on
# sys.path as the M3's firmware does.
M0_ROMFS_ADDR = 0x00100000
M0 = Layout("m0", "Cortex-M0", "microbit", "KVEDGE_M0_FIRMWARE", "micropython-qemu-more",
            r"^firmware-microbit-heap(\d+)\.elf$", romfs_addr=M0_ROMFS_ADDR, romfs_max=0x400000,
            disk_addr=0x20100000, marches=("armv6m",), image_name="firmware-microbit-heapN.elf",
            qemu_args=["-global", "nrf51-soc.flash-size=%d" % (5 * 1024 * 1024),
                       "-global", "nrf51-soc.sram-size=%d" % (16 * 1024 * 1024)],
            rom_mount=board_scripts.source("m0_rom_mount", const=True, ADDR=M0_ROMFS_ADDR, SIZE=0x400000))
# the Cortex-M7 built single-precision (mps2-an500, firmware "an500sp": Armv7E-M with the DSP extension, float32,
# loads armv7emsp .mpy: the RP2350's stand-in): code and heap in SSRAM1 at 0; PSRAM at 0x60000000 (16 MiB) holds
# the RAM disk (12 MiB) below the firmware's ROMFS partition at 0x60C00000 (4 MiB), which it mounts at /rom
M7 = Layout("m7", "Cortex-M7", "mps2-an500", "KVEDGE_M7_FIRMWARE", "micropython-qemu-more",
            r"^firmware-an500sp-heap(\d+)\.elf$", romfs_addr=0x60C00000, romfs_max=0x400000, disk_addr=0x60000000,
            marches=("armv7emsp", "armv7m", "armv6m"), image_name="firmware-an500sp-heapN.elf")
# the Cortex-M55 (mps3-an547: Armv8.1-M, DSP and MVE, float64, loads armv7emdp .mpy): code, heap and stack in the
# 2 MiB SRAM at 0x01000000; the ROMFS partition at 0x62000000 (32 MiB), the RAM disk in the 16 MiB above it
M55 = Layout("m55", "Cortex-M55", "mps3-an547", "KVEDGE_M55_FIRMWARE", "micropython-qemu-more",
             r"^firmware-an547-heap(\d+)\.elf$", romfs_addr=0x62000000, romfs_max=0x400000, disk_addr=0x60000000,
             marches=("armv7emdp", "armv7m", "armv6m"), image_name="firmware-an547-heapN.elf")
# the Cortex-M3 with its GC heap in PSRAM (firmware-psram-heap4194304.elf, -heap8388608.elf: the PSRAM boards'
# stand-ins): the heap at the top of the 16 MiB PSRAM, the ROMFS slot below it from 0x21000000 (12 MiB beside the
# 4 MiB heap, 8 MiB beside the 8 MiB one: room for a 15M-class model's int4 weights), the RAM disk in the 4 MiB of
# SSRAM2/3 at 0x20000000 (no host file can back it: no disk_image)
def _psram_m3(heap):
    return Layout("m3-psram%d" % (heap >> 20), M3.cpu, M3.machine, M3.firmware_env, M3.firmware_sub,
                  r"^firmware-psram-heap(%d)\.elf$" % heap, romfs_addr=0x21000000, romfs_max=0x1000000 - heap,
                  disk_addr=0x20000000, marches=M3.marches, image_name="firmware-psram-heap%d.elf" % heap,
                  disk_blocks=1024)


M3P4, M3P8 = _psram_m3(0x400000), _psram_m3(0x800000)
PSRAM_LAYOUTS = (M3P4, M3P8)
M3_FAMILY = (M3,) + PSRAM_LAYOUTS  # one machine (mps2-an385), its images with the heap in SRAM or in PSRAM
# the Xtensa lx106 (qemu-system-xtensa lx60-nommu: call0 ABI, no FPU, loads xtensa .mpy; the ESP32s' stand-in,
# whose xtensawin code it cannot load): code, heap and stack from 0x60000000; the firmware mounts the ROMFS
# partition at 0x50100000 (4 MiB) at /rom; the RAM disk in the unused sysram at 0x61000000. A CPU exception (an
# unaligned 32-bit access from viper) prints FATAL and qemu exits. -semihosting ends qemu on exit().
XT = Layout("xt", "Xtensa lx106", "lx60-nommu", "KVEDGE_XT_FIRMWARE", "micropython-xtensa",
            r"^firmware-lx106-heap(\d+)\.elf$", romfs_addr=0x50100000, romfs_max=0x400000, disk_addr=0x61000000,
            marches=("xtensa",), image_name="firmware-lx106-heapN.elf", qemu_args=["-cpu", "lx106"],
            qemu=("qemu-system-xtensa", "qemu-system-misc"), fault=XT_FAULT, disk_script="_xtdisk",
            stands_for=("xtensawin",))


def _big_rom(base, key, romfs_addr, romfs_max, disk_addr, disk_blocks):
    """`base`'s machine and firmware with a ROMFS slot of romfs_max bytes at romfs_addr (RAM the firmware leaves
    unused) that the session code mounts at /rom (board script big_rom_mount), and the RAM disk moved to
    disk_addr out of its way."""
    return Layout(key, base.cpu, base.machine, base.firmware_env, base.firmware_sub, base.image.pattern,
                  romfs_addr=romfs_addr, romfs_max=romfs_max, disk_addr=disk_addr, marches=base.marches,
                  image_name=base.image_name, qemu_args=base.qemu_args, disk_blocks=disk_blocks, qemu=base.qemu,
                  fault=base.fault, disk_script=base.disk_script, stands_for=base.stands_for,
                  rom_mount=board_scripts.source("big_rom_mount", const=True, ADDR=romfs_addr, SIZE=romfs_max))


# a 15M-class model's int4 weights (~7.7 MB) in place, as the PSRAM Cortex-M3 reads them (M3P4's 12 MiB slot): on
# the Cortex-M7 the 12 MiB of PSRAM below the firmware's partition (the RAM disk moved into the partition's 4 MiB,
# which then holds no ROMFS for the firmware to mount); on the Xtensa 16 MiB of its sysrom from the partition's
# address on (qemu backs all 64 MiB with RAM; the RAM disk stays in the sysram)
M7_BIG_ROM = _big_rom(M7, "m7-bigrom", 0x60000000, 0xC00000, 0x60C00000, 1024)
XT_BIG_ROM = _big_rom(XT, "xt-bigrom", 0x50100000, 0x1000000, XT.disk_addr, XT.disk_blocks)
BIG_ROM = {"m7": M7_BIG_ROM, "xt": XT_BIG_ROM}

LAYOUTS = {"m3": M3, "m0": M0, "m7": M7, "m55": M55, "m3-psram4": M3P4, "m3-psram8": M3P8, "xt": XT}

# the Cortex-M3's figures under their old names
FIRMWARE_ENV = M3.firmware_env
MACHINE = M3.machine
ROMFS_ADDR = M3.romfs_addr
ROMFS_MAX = M3.romfs_max
DISK_ADDR = M3.disk_addr
PSRAM_BYTES = M3.psram_bytes
MARCHES = M3.marches
_IMAGE = M3.image

# Board side of the RAM disk: a block device over guest RAM (the extended block protocol littlefs uses), the board
# script _m3disk.py with the disk's address and geometry as constants.
def disk_module(layout=None):
    """The RAM disk's board-side code for this machine's disk address."""
    layout = layout or M3
    return board_scripts.source(layout.disk_script, const=True, ADDR=layout.disk_addr, BS=DISK_BLOCK,
                                N=layout.disk_blocks)


DISK_MODULE = disk_module(M3)
# Prepended to code run in a fresh session on the Cortex-M3: the RAM disk at / (the module from /rom when the
# image has it). Other machines: Layout.mount.
MOUNT = M3.mount
