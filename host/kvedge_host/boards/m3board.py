"""The emulated Cortex-M3 board: MicroPython's bare-metal firmware on qemu's mps2-an385 (armv7-m, float32,
31-bit small ints, Thumb-2 viper), one firmware image per heap size, driven through the `mpremote` CLI.

    with M3Board(board="rp2040", romfs=image) as b:       # the image holding the heap_bytes of rp2040
        print(b.exec("import gc; print(gc.mem_free())"))   # a fresh interpreter (soft reset), RAM disk at /

What the board has:
- the firmware for the heap (from $KVEDGE_M3_FIRMWARE, else ../shared/runtimes/micropython-cortex-m3;
  paths.SHARED);
- optionally a ROMFS image at 0x21000000 (4 MiB slot), mounted by the firmware at /rom at every reset, with /rom
  and /rom/lib on sys.path: code imported from it stays in place (a bytecode .mpy costs ~100 bytes of heap).
  Build one with stage_package() and build_romfs() (mpremote romfs; viper modules precompiled with mpy-cross);
- a writable littlefs2 RAM disk in guest RAM outside the heap (12 MiB at 0x21400000), mounted at / and made the
  cwd by MOUNT at the start of every session: the firmware mounts no filesystem itself, and its contents survive
  soft resets (a new mpremote session) but not a restart of qemu, unless `disk_image` backs the board's PSRAM
  with a host file (then it behaves like flash: it survives qemu being killed at any instruction and started
  again). DISK_MODULE (board_scripts/_m3disk.py) is its board-side code: mounted with progsize=256 as
  MicroPython's rp2 and esp32 ports mount their flash, and copying blocks in viper so that reading a file
  allocates nothing, as with a C block device;
- `-icount shift=0`: one guest instruction = 1 ns of virtual time, so `time.ticks_us()` counts thousands of
  instructions (1 us = 1000 instructions) and figures are the same on a loaded machine.

The same machinery drives the emulated Cortex-M0 (qemu's microbit machine, nRF51, Armv6-M: Thumb-1 only, loads
only armv6m .mpy; the RP2040's stand-in): a Layout says where each machine keeps its firmware, its ROMFS slot and
its RAM disk (M3, M0; pass layout=M0). Its firmware has no ROMFS partition, so the ROMFS image sits in its flash
above the firmware and the session code mounts it at /rom first; the RAM disk is SRAM raised above the firmware's
stack, outside the heap. A Thumb-2 instruction there is a HardFault, after which the board prints its registers
and hangs: exec() reports it as M3Fault once the board has been silent for FAULT_QUIET seconds after the report
(or at its time-out), restarting qemu.

qemu runs in its own process group and dies with the thread that started it (kvedge_host.boards.tied)."""
import os
import re
import select
import shutil
import signal
import subprocess
import tempfile
import time

from . import board_scripts, tied
from .. import profiles
from .deploy import DeployError, mpremote, mpremote_exe, mpy_cross_exe
from ..paths import SHARED_RUNTIMES

DISK_BLOCK = 4096            # a flash sector, as littlefs is used on rp2 and esp32 boards
DISK_BLOCKS = 3072           # 12 MiB
INSTRUCTIONS_PER_US = 1000   # under -icount shift=0
_PTY = re.compile(rb"char device redirected to (/dev/pts/\d+)")
FAULT = "HardFault exception caught"   # what the firmware prints on a HardFault (then it spins for ever)
FAULT_QUIET = 3              # seconds of silence after a fault report that mean the board hangs


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
XT_FAULT = "FATAL: Xtensa"
XT = Layout("xt", "Xtensa lx106", "lx60-nommu", "KVEDGE_XT_FIRMWARE", "micropython-xtensa",
            r"^firmware-lx106-heap(\d+)\.elf$", romfs_addr=0x50100000, romfs_max=0x400000, disk_addr=0x61000000,
            marches=("xtensa",), image_name="firmware-lx106-heapN.elf", qemu_args=["-cpu", "lx106"],
            qemu=("qemu-system-xtensa", "qemu-system-misc"), fault=XT_FAULT, disk_script="_xtdisk",
            stands_for=("xtensawin",))
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


class M3Missing(RuntimeError):
    """The emulated board cannot run here (no qemu, no firmware image for the heap): the message says why."""


class M3Error(RuntimeError):
    """Code on the board failed or timed out; .output holds what the board printed."""

    def __init__(self, msg, output=""):
        RuntimeError.__init__(self, msg)
        self.output = output


class M3Fault(M3Error):
    """The board took a HardFault (e.g. a Thumb-2 instruction on the Cortex-M0) and hung; .pc is the faulting
    PC its register dump names (an int, or None when the dump was cut short)."""

    def __init__(self, msg, output="", pc=None):
        M3Error.__init__(self, msg, output)
        self.pc = pc


_FAULT_PC = re.compile(r"R15:\s*([0-9A-Fa-f]{8})")
_XT_PC = re.compile(r"EPC1\s+0x([0-9A-Fa-f]{8})")


def fault_report(text, fault=FAULT):
    """(faulted, pc) from what a board printed: faulted when the firmware's fault report is complete (an Arm
    HardFault's register dump ends with xPSR, an Xtensa FATAL's with PS), pc the faulting PC (R15, EPC1) or None."""
    i = text.find(fault)
    end, pc = ("xPSR:", _FAULT_PC) if fault == FAULT else ("PS ", _XT_PC)
    if i < 0 or end not in text[i:]:
        return False, None
    m = pc.search(text, i)
    return True, (int(m.group(1), 16) if m else None)


def run_watched(cmd, timeout, quiet=FAULT_QUIET, fault=FAULT):
    """Run `cmd` (mpremote talking to a board) reading its output as it comes.

    Returns (status, output, returncode): "done" when it exited; "fault" when the firmware reported a
    HardFault and then printed nothing more for `quiet` seconds (the board hangs: mpremote would wait for ever),
    or when the time-out came after such a report; "timeout" when `timeout` seconds passed without one. The
    command is killed unless it exited. fault: the firmware's fault report's first words (Layout.fault)."""
    p = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    buf = bytearray()
    start = last = time.monotonic()
    faulted = False
    status = None
    try:
        while status is None:
            now = time.monotonic()
            if faulted and now - last >= quiet:
                status = "fault"
                break
            if now - start >= timeout:
                status = "fault" if fault_report(buf.decode("utf-8", "replace"), fault)[0] else "timeout"
                break
            r, _, _ = select.select([p.stdout], [], [], 0.2)
            if not r:
                continue
            chunk = os.read(p.stdout.fileno(), 65536)
            if not chunk:
                status = "done"
                break
            buf += chunk
            last = time.monotonic()
            if not faulted and fault.encode() in buf:
                faulted = fault_report(buf.decode("utf-8", "replace"), fault)[0]
    finally:
        if status != "done" and p.poll() is None:
            p.kill()
        rc = p.wait()
        p.stdout.close()
    return status, buf.decode("utf-8", "replace"), rc


def firmware_dir(layout=None):
    layout = layout or M3
    d = os.environ.get(layout.firmware_env)
    if d:
        return os.path.abspath(d)
    return os.path.join(SHARED_RUNTIMES, layout.firmware_sub)


def firmware_images(folder=None, layout=None):
    """{heap bytes: image path} of the machine's firmware images in the folder."""
    layout = layout or M3
    folder = folder or firmware_dir(layout)
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    out = {}
    for n in names:
        m = layout.image.match(n)
        if m:
            out[int(m.group(1))] = os.path.join(folder, n)
    return out


def firmware_for(heap, layout=None):
    """The machine's image whose heap is exactly `heap` bytes; M3Missing says why there is none."""
    layout = layout or M3
    folder = firmware_dir(layout)
    imgs = firmware_images(folder, layout)
    if heap in imgs:
        return imgs[heap]
    if not os.path.isdir(folder):
        raise M3Missing("no %s firmware folder %s (set %s to the folder of %s images)"
                        % (layout.cpu, folder, layout.firmware_env, layout.image_name))
    if not imgs:
        raise M3Missing("no %s image in %s" % (layout.image_name, folder))
    raise M3Missing("no %s firmware image with a %d-byte heap in %s (images there: %s)"
                    % (layout.cpu, heap, folder, ", ".join(str(h) for h in sorted(imgs))))


def qemu_exe(layout=None):
    name, package = (layout or M3).qemu
    exe = shutil.which(name)
    if not exe:
        raise M3Missing("%s is not installed (Debian: apt-get install %s; tools/setup.sh installs it when run as "
                        "root)" % (name, package))
    return exe


def heap_of(board=None, heap=None):
    if heap:
        return int(heap)
    return int(profiles.load(board or "rp2040")["heap_bytes"])


def missing(board=None, heap=None, layout=None):
    """None when the emulated machine (default the Cortex-M3) can run with this profile's (or this) heap, else
    the reason."""
    try:
        qemu_exe(layout)
        firmware_for(heap_of(board, heap), layout)
        mpremote_exe()
    except (M3Missing, DeployError) as e:
        return str(e)
    return None


def layout_for(board=None, heap=None):
    """The emulated machine that stands for a profile: the one whose firmware's own -march is the profile's
    (the RP2040's armv6m on the Cortex-M0, the RP2350's armv7emsp on the single-precision Cortex-M7) when it has
    an image with this heap; else the Cortex-M3 with its heap in PSRAM when one of those images has it (the
    PSRAM profiles); else the Cortex-M3 (the ESP32s, whose Xtensa code no machine here runs)."""
    march = profiles.load(board or "rp2040").get("mpy_march")
    heap = heap_of(board, heap)
    for lay in LAYOUTS.values():
        if lay not in M3_FAMILY and lay.marches[0] == march and heap in firmware_images(layout=lay):
            return lay
    return psram_layout(heap) or M3


def m3_images():
    """{heap bytes: image path} of every Cortex-M3 image, those with the heap in PSRAM included."""
    out = {}
    for lay in M3_FAMILY:
        out.update(firmware_images(layout=lay))
    return out


def psram_layout(heap):
    """The Cortex-M3 layout whose PSRAM-heap image has exactly `heap` bytes, or None."""
    for lay in PSRAM_LAYOUTS:
        if heap in firmware_images(layout=lay):
            return lay
    return None


ROM_SHARE = 2  # weights above 1/ROM_SHARE of the emulated board's RAM disk go into its ROMFS image (kvedge demo)


def m3_heap(prof, board=None, weights_bytes=0):
    """The heap of the emulated board's image for a profile: its own when an image has it (on the machine that
    stands for it, or the Cortex-M3), else (a PSRAM profile) the image its footprint was measured on; for weights
    that go into the ROMFS image (in_rom) and do not fit that image's ROMFS slot, the smaller-heap image with the
    largest slot that holds them (a PSRAM profile's 16 MB of flash hold what the emulated board's PSRAM, split
    between heap and ROMFS slot, cannot at its full heap). None when none is here (the caller says why)."""
    imgs = set(m3_images())
    if board:
        imgs |= set(firmware_images(layout=layout_for(board)))
    if prof["heap_bytes"] in imgs:
        heap = prof["heap_bytes"]
    else:
        img = (prof.get("footprint") or {}).get("heap_image")
        heap = img if img in imgs and img < prof["heap_bytes"] else None
    if heap is None or not in_rom(weights_bytes, layout_for(board, heap)) or \
            rom_fits(weights_bytes, layout_for(board, heap)):
        return heap
    slots = []
    for h in imgs:
        lay = layout_for(board, h)
        if h < heap and lay in M3_FAMILY and rom_fits(weights_bytes, lay):
            slots.append((lay.romfs_max, h))
    return max(slots)[1] if slots else heap


def in_rom(weights_bytes, layout):
    """Whether the emulated board's weights go into its ROMFS image: above 1/ROM_SHARE of its RAM disk."""
    return weights_bytes * ROM_SHARE > layout.disk_blocks * DISK_BLOCK


def rom_fits(weights_bytes, layout):
    """Whether the layout's ROMFS slot holds the weights beside the RAM-disk module (64 KB kept for it)."""
    return weights_bytes + 65536 <= layout.romfs_max


def march_for(board=None, layout=None):
    """The -march for .mpy files on this emulated machine: the profile's own when the firmware loads it
    (rp2040's armv6m), else the CPU's (armv7m on the Cortex-M3: xtensawin or armv7emsp machine code cannot run
    there; armv6m on the Cortex-M0)."""
    layout = layout or M3
    m = profiles.load(board or "rp2040").get("mpy_march")
    if m in layout.marches:
        return m
    return "armv7m" if layout in M3_FAMILY else layout.marches[0]


# -- images -----------------------------------------------------------------------------------------------
def compile_to(src, dst, board_name, march=None):
    """mpy-cross one file; `board_name` is its name on the board (in tracebacks)."""
    os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
    cmd = [mpy_cross_exe()] + (["-march=" + march] if march else []) + ["-s", board_name, "-o", dst, src]
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    if p.returncode:
        raise DeployError("mpy-cross -march=%s failed on %s: %s" % (march, board_name, p.stdout.decode().strip()))


def stage(folder, pairs, march=None, mpy=True):
    """Put files into `folder` laid out as on the board: pairs are (host path, board path). With mpy=True every
    .py becomes an .mpy (-march=ARCH: viper/native code is machine code for the board); other files are
    copied. Returns the board paths written."""
    out = []
    for src, rel in pairs:
        if mpy and rel.endswith(".py"):
            rel = rel[:-3] + ".mpy"
            compile_to(src, os.path.join(folder, rel), rel[:-4] + ".py", march)
        else:
            dst = os.path.join(folder, rel)
            os.makedirs(os.path.dirname(dst) or ".", exist_ok=True)
            shutil.copyfile(src, dst)
        out.append(rel)
    return out


def stage_package(folder, march="armv6m", mpy=True, extra=(), layout=None):
    """The device package (kvedge/...) and `extra` pairs into `folder`, plus the machine's RAM-disk module."""
    from .deploy import device_sources, for_arch
    written = stage(folder, for_arch(list(device_sources()) + list(extra), march), march, mpy)
    write_disk_module(folder, march if mpy else None, layout)
    return written


def write_disk_module(folder, march=None, layout=None):
    """The machine's RAM-disk module (as .mpy when march is given: no compile on the board)."""
    src = os.path.join(folder, DISK_NAME + ".py")
    with open(src, "w") as f:
        f.write(disk_module(layout))
    if march is not None:
        compile_to(src, os.path.join(folder, DISK_NAME + ".mpy"), DISK_NAME + ".py", march)
        os.remove(src)


def tree_files(folder, board_root, exts=(".py", ".mpy", ".json", ".bin")):
    """(host path, board path) of the files under `folder` with these endings, at board_root/relative path."""
    out = []
    for d, subdirs, names in os.walk(folder):
        subdirs[:] = sorted(x for x in subdirs if x not in ("__pycache__", "node_modules") and x[0] != ".")
        for n in sorted(names):
            if n.endswith(exts):
                p = os.path.join(d, n)
                out.append((p, board_root.rstrip("/") + "/" + os.path.relpath(p, folder).replace(os.sep, "/")))
    return out


def _littlefs():
    try:
        import littlefs
    except ImportError:
        raise M3Missing("littlefs-python is not installed (pip install -r requirements.txt)")
    return littlefs


def _lfs(littlefs, blocks=DISK_BLOCKS, **kw):
    # the geometry and buffer sizes of vfs.VfsLfs2 over DISK_MODULE's RamDisk (readsize 32, progsize 256 as
    # the rp2 and esp32 ports mount their flash, lookahead 32, cache min(block, 4 * progsize))
    return littlefs.LittleFS(block_size=DISK_BLOCK, block_count=blocks, read_size=32, prog_size=256,
                             cache_size=1024, lookahead_size=32, **kw)


def build_disk(image, files, march=None, mpy=False, work=None, layout=None):
    """A littlefs2 image of the RAM disk holding `files` [(host path, absolute board path)], built on the host
    and loaded into guest RAM when qemu starts: files reach the board without crossing the emulated UART. With
    mpy=True .py files go as .mpy for `march` (compiled in `work`). layout: the machine (its disk's size)."""
    from .deploy import for_arch
    littlefs = _littlefs()
    fs = _lfs(littlefs, (layout or M3).disk_blocks)
    tmp = None
    try:
        for src, dst in for_arch(files, march):  # the files a chip of `march` is given
            if not dst.startswith("/"):
                dst = "/" + dst
            if mpy and dst.endswith(".py"):
                if tmp is None:
                    tmp = tempfile.mkdtemp(prefix="kvedge-mpy-", dir=work)
                out = os.path.join(tmp, "%d.mpy" % len(os.listdir(tmp)))
                compile_to(src, out, dst.rsplit("/", 1)[-1], march)
                src, dst = out, dst[:-3] + ".mpy"
            folder = dst.rsplit("/", 1)[0]
            if folder:
                fs.makedirs(folder, exist_ok=True)
            with open(src, "rb") as f, fs.open(dst, "wb") as g:
                g.write(f.read())
        data = bytes(fs.context.buffer)
    finally:
        if tmp:
            shutil.rmtree(tmp, ignore_errors=True)
    # blocks never written after the last used one need not be loaded (littlefs never reads a free block)
    n = len(data) // DISK_BLOCK
    erased = b"\xff" * DISK_BLOCK
    while n and data[(n - 1) * DISK_BLOCK:n * DISK_BLOCK] in (erased, bytes(DISK_BLOCK)):
        n -= 1
    with open(image, "wb") as f:
        f.write(data[:max(n, 2) * DISK_BLOCK])
    return image


def read_disk(image, layout=None):
    """{absolute board path: bytes} of every file in a RAM-disk image (e.g. dumped from a running board)."""
    littlefs = _littlefs()
    blocks = (layout or M3).disk_blocks
    with open(image, "rb") as f:
        data = f.read()
    data = data + bytes(DISK_BLOCK * blocks - len(data))
    fs = _lfs(littlefs, blocks, mount=False)
    fs.context.buffer[:] = data
    fs.mount()
    out = {}
    for root, _, names in fs.walk("/"):
        for n in names:
            p = root.rstrip("/") + "/" + n
            with fs.open(p, "rb") as f:
                out[p] = f.read()
    return out


def build_romfs(folder, image, layout=None):
    """A ROMFS image of `folder` (files as they are: stage() compiled what had to be compiled), each file's data
    4-byte aligned (kvedge_host.boards.romfs) so that weights can be read in place."""
    from . import romfs
    files = []
    for d, subdirs, names in os.walk(folder):
        subdirs.sort()
        for n in sorted(names):
            p = os.path.join(d, n)
            files.append((p, os.path.relpath(p, folder).replace(os.sep, "/")))
    romfs.write(files, image)
    size = os.path.getsize(image)
    slot = (layout or M3).romfs_max
    if size > slot:
        raise DeployError("ROMFS image %s is %d bytes; the board's ROMFS slot holds %d" % (image, size, slot))
    return image


# -- the board --------------------------------------------------------------------------------------------
class M3Board:
    """One emulated board. start() returns its serial port (a pty); stop() ends qemu.

    heap: bytes (default: the board profile's heap_bytes); romfs: image path for /rom; icount: deterministic
    instruction counting; disk: a RAM-disk image (build_disk) loaded at every start; disk_image: a host file
    holding the board's PSRAM (created when missing), so the RAM disk persists across kill and start like flash
    (use one of the two). Without disk_image a restart (restart()) starts again from the images: what the code
    wrote to the RAM disk is gone."""

    def __init__(self, board="rp2040", heap=None, romfs=None, disk=None, icount=True, log=None, disk_image=None,
                 layout=None):
        self.board = board
        self.layout = layout or psram_layout(heap_of(board, heap)) or M3
        if disk_image and not self.layout.psram_bytes:
            raise M3Missing("the emulated %s (qemu %s) has no RAM a host file can back: no disk_image"
                            % (self.layout.cpu, self.layout.machine))
        self.disk_image = os.path.abspath(disk_image) if disk_image else None
        self.heap = heap_of(board, heap)
        self.firmware = firmware_for(self.heap, self.layout)
        self.romfs = os.path.abspath(romfs) if romfs else None
        self.disk = os.path.abspath(disk) if disk else None
        self.icount = icount
        self.log = log
        self.port = None
        self.proc = None
        self.starts = 0
        self._dir = None

    def command(self):
        lay = self.layout
        machine = lay.machine + (",memory-backend=psram" if self.disk_image else "")
        cmd = [qemu_exe(lay), "-machine", machine] + lay.qemu_args + [
            "-nographic", "-monitor", "null", "-semihosting", "-serial", "pty", "-kernel", self.firmware]
        if self.disk_image:  # qemu maps the file: every guest write is in it, whenever qemu dies
            cmd += ["-object", "memory-backend-file,id=psram,size=%d,mem-path=%s,share=on"
                    % (lay.psram_bytes, self.disk_image)]
        if self.icount:
            cmd += ["-icount", "shift=0"]
        if self.romfs:
            cmd += ["-device", "loader,file=%s,addr=0x%x,force-raw=on" % (self.romfs, lay.romfs_addr)]
        if self.disk:
            cmd += ["-device", "loader,file=%s,addr=0x%x,force-raw=on" % (self.disk, lay.disk_addr)]
        return cmd

    def start(self, timeout=30):
        for img in (self.romfs, self.disk):
            if img and not os.path.isfile(img):
                raise M3Missing("no image %s" % img)
        self._dir = tempfile.mkdtemp(prefix="kvedge-m3-")
        logpath = os.path.join(self._dir, "qemu.log")
        with open(logpath, "wb") as logf:
            self.proc = tied.popen(self.command(), stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT)
        self.starts += 1
        end = time.monotonic() + timeout
        while True:
            with open(logpath, "rb") as f:
                text = f.read()
            m = _PTY.search(text)
            if m:
                self.port = m.group(1).decode()
                break
            if self.proc.poll() is not None or time.monotonic() > end:
                self.stop()
                raise M3Error("qemu did not start: %s" % text.decode("utf-8", "replace").strip()[-1000:])
            time.sleep(0.02)
        if self.log:
            self.log("qemu %s, heap %d, port %s" % (self.machine(), self.heap, self.port))
        return self.port

    def machine(self):
        return "%s (%s)" % (self.layout.machine, os.path.basename(self.firmware))

    def stop(self):
        tied.kill(self.proc)
        self.proc = None
        self.port = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def restart(self):
        """A hard reset: qemu is killed and started again (a soft reset cannot stop a runaway program)."""
        self.stop()
        return self.start()

    def alive(self):
        return self.proc is not None and self.proc.poll() is None

    def pause(self):
        """Stop qemu's process while the board waits for its next session: the firmware polls its UART for
        input, so an idle board takes a host core. Under -icount the guest sees nothing (its clock counts its
        instructions). exec() continues it."""
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGSTOP)

    def _continue(self):
        if self.alive():
            os.killpg(self.proc.pid, signal.SIGCONT)

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- running code ---------------------------------------------------------------------------------
    def mpremote(self, args, resume=False, timeout=300):
        """`mpremote connect PORT [resume] ARGS`; raises DeployError on failure or timeout."""
        return mpremote(self.port, args, resume=resume, timeout=timeout)

    def exec(self, code, timeout=300, mount=True, resume=False):
        """Run `code` in a fresh interpreter (soft reset; resume=True keeps the state) with the ROMFS at /rom
        and the RAM disk at / as cwd; returns what it printed. Raises M3Error with the output when the code
        raised; M3Fault when the board took a HardFault (it then hangs: seen as its fault report followed by
        FAULT_QUIET seconds of silence, or at the time-out); M3Error when it timed out. After a fault or a
        time-out qemu is restarted (Ctrl-C cannot stop a runaway or hung board)."""
        self._continue()
        cmd = [mpremote_exe(), "connect", self.port] + (["resume"] if resume else []) + [
            "exec", (self.layout.mount if mount else "") + code]
        status, out, rc = run_watched(cmd, timeout, fault=self.layout.fault)
        if status == "done" and rc == 0:
            return out
        if status == "done" and fault_report(out, self.layout.fault)[0]:
            status = "fault"  # the Xtensa board reports a CPU exception and qemu exits: mpremote loses its port
        if status == "done":
            last = [ln for ln in out.strip().splitlines() if ln.strip()]
            msg = "mpremote failed on %s (exit %d): %s" % (self.port, rc, last[-1] if last else "no output")
            raise M3Error(msg, msg + "\n" + out[-4000:])
        self.restart()
        if status == "fault":
            _, pc = fault_report(out, self.layout.fault)
            if self.layout.fault != FAULT:
                msg = ("CPU exception on the emulated %s (qemu %s) at PC=%s: the firmware reported it and qemu "
                       "exited (board restarted)" % (self.layout.cpu, self.layout.machine,
                                                    "0x%08X" % pc if pc is not None else "?"))
            else:
                msg = ("HardFault on the emulated %s (qemu %s) at PC=%s: the board hung after its fault report "
                       "(no output for %ds; board restarted)"
                       % (self.layout.cpu, self.layout.machine, "0x%08X" % pc if pc is not None else "?",
                          FAULT_QUIET))
            raise M3Fault(msg, out[-4000:], pc)
        msg = "timed out after %ds (board restarted)" % timeout
        raise M3Error(msg, "mpremote timed out after %ds on %s\n%s" % (timeout, self.port, out[-2000:]))


def instructions(us):
    """Instructions executed in `us` microseconds of ticks_us() under -icount shift=0."""
    return int(round(us * INSTRUCTIONS_PER_US))


def run_code(code, board="rp2040", heap=None, package="mpy", march=None, extra=(), timeout=600, log=None,
             layout=None):
    """Run `code` once on a fresh emulated board (the Cortex-M3 unless layout=M0) and return what it printed.

    package: "mpy" (the device package as .mpy for march, default march_for(board, layout)), "py" (as source)
    or None; extra: (host path, board path) pairs added to the ROMFS image (e.g. a model file: open it as
    '/rom/NAME'). Time with time.ticks_us() (1 us = 1000 instructions); read heap with
    gc.mem_alloc()/gc.mem_free(). Raises M3Missing when the board cannot run here, M3Fault when it took a
    HardFault, M3Error when the code fails."""
    why = missing(board, heap, layout)
    if why:
        raise M3Missing(why)
    march = march or march_for(board, layout)
    with tempfile.TemporaryDirectory(prefix="kvedge-m3rom-") as tmp:
        folder = os.path.join(tmp, "rom")
        os.makedirs(folder)
        if package:
            stage_package(folder, march, mpy=(package == "mpy"), extra=extra, layout=layout)
        else:
            stage(folder, extra, march, mpy=False)
            write_disk_module(folder, march, layout)
        image = build_romfs(folder, os.path.join(tmp, "rom.img"), layout)
        with M3Board(board, heap=heap, romfs=image, log=log, layout=layout) as b:
            return b.exec(code, timeout=timeout)
