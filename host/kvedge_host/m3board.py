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

qemu runs in its own process group and dies with the thread that started it (kvedge_host.tied)."""
import os
import re
import shutil
import subprocess
import tempfile
import time

from . import board_scripts, boards, tied
from .deploy import DeployError, mpremote, mpremote_exe, mpy_cross_exe
from .paths import SHARED_RUNTIMES

FIRMWARE_ENV = "KVEDGE_M3_FIRMWARE"
MACHINE = "mps2-an385"
ROMFS_ADDR = 0x21000000
ROMFS_MAX = 0x400000
DISK_ADDR = 0x21400000       # PSRAM after the ROMFS slot, up to 0x21FFFFFF: zero at power-on, not the heap
DISK_BLOCK = 4096            # a flash sector, as littlefs is used on rp2 and esp32 boards
DISK_BLOCKS = 3072           # 12 MiB
PSRAM_BYTES = 16 * 1024 * 1024  # 0x21000000-0x21FFFFFF: qemu's "main RAM" of mps2-an385 (ROMFS slot + RAM disk)
MARCHES = ("armv6m", "armv7m", "armv7em")   # what the firmware loads (armv7emsp/dp are refused)
INSTRUCTIONS_PER_US = 1000   # under -icount shift=0
_IMAGE = re.compile(r"^firmware-heap(\d+)\.elf$")
_PTY = re.compile(rb"char device redirected to (/dev/pts/\d+)")

# Board side of the RAM disk: a block device over guest RAM (the extended block protocol littlefs uses), the board
# script _m3disk.py with the disk's address and geometry as constants.
DISK_NAME = "_m3disk"
DISK_MODULE = board_scripts.source(DISK_NAME, const=True, ADDR=DISK_ADDR, BS=DISK_BLOCK, N=DISK_BLOCKS)
# Prepended to code run in a fresh session: the RAM disk at / (the module DISK_NAME from /rom when the image has it).
MOUNT = board_scripts.source("m3_mount")


class M3Missing(RuntimeError):
    """The emulated board cannot run here (no qemu, no firmware image for the heap): the message says why."""


class M3Error(RuntimeError):
    """Code on the board failed or timed out; .output holds what the board printed."""

    def __init__(self, msg, output=""):
        RuntimeError.__init__(self, msg)
        self.output = output


def firmware_dir():
    d = os.environ.get(FIRMWARE_ENV)
    if d:
        return os.path.abspath(d)
    return os.path.join(SHARED_RUNTIMES, "micropython-cortex-m3")


def firmware_images(folder=None):
    """{heap bytes: image path} of the firmware images in the folder."""
    folder = folder or firmware_dir()
    try:
        names = os.listdir(folder)
    except OSError:
        return {}
    out = {}
    for n in names:
        m = _IMAGE.match(n)
        if m:
            out[int(m.group(1))] = os.path.join(folder, n)
    return out


def firmware_for(heap):
    """The image whose heap is exactly `heap` bytes; M3Missing says why there is none."""
    folder = firmware_dir()
    imgs = firmware_images(folder)
    if heap in imgs:
        return imgs[heap]
    if not os.path.isdir(folder):
        raise M3Missing("no Cortex-M3 firmware folder %s (set %s to the folder of firmware-heapN.elf images)"
                        % (folder, FIRMWARE_ENV))
    if not imgs:
        raise M3Missing("no firmware-heapN.elf image in %s" % folder)
    raise M3Missing("no Cortex-M3 firmware image with a %d-byte heap in %s (images there: %s)"
                    % (heap, folder, ", ".join(str(h) for h in sorted(imgs))))


def qemu_exe():
    exe = shutil.which("qemu-system-arm")
    if not exe:
        raise M3Missing("qemu-system-arm is not installed (Debian: apt-get install qemu-system-arm; "
                        "tools/setup.sh installs it when run as root)")
    return exe


def heap_of(board=None, heap=None):
    if heap:
        return int(heap)
    return int(boards.load(board or "rp2040")["heap_bytes"])


def missing(board=None, heap=None):
    """None when the emulated board can run with this profile's (or this) heap, else the reason."""
    try:
        qemu_exe()
        firmware_for(heap_of(board, heap))
        mpremote_exe()
    except (M3Missing, DeployError) as e:
        return str(e)
    return None


def march_for(board=None):
    """The -march for .mpy files on this emulated board: the profile's own when the firmware loads it (rp2040's
    armv6m), else the CPU's armv7m (xtensawin or armv7emsp machine code cannot run on a Cortex-M3)."""
    m = boards.load(board or "rp2040").get("mpy_march")
    return m if m in MARCHES else "armv7m"


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


def stage_package(folder, march="armv6m", mpy=True, extra=()):
    """The device package (kvedge/...) and `extra` pairs into `folder`, plus the RAM-disk module."""
    from .deploy import device_sources
    written = stage(folder, list(device_sources()) + list(extra), march, mpy)
    write_disk_module(folder, march if mpy else None)
    return written


def write_disk_module(folder, march=None):
    """The RAM-disk module (as .mpy when march is given: no compile on the board)."""
    src = os.path.join(folder, DISK_NAME + ".py")
    with open(src, "w") as f:
        f.write(DISK_MODULE)
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


def _lfs(littlefs, **kw):
    # the geometry and buffer sizes of vfs.VfsLfs2 over DISK_MODULE's RamDisk (readsize 32, progsize 256 as
    # the rp2 and esp32 ports mount their flash, lookahead 32, cache min(block, 4 * progsize))
    return littlefs.LittleFS(block_size=DISK_BLOCK, block_count=DISK_BLOCKS, read_size=32, prog_size=256,
                             cache_size=1024, lookahead_size=32, **kw)


def build_disk(image, files, march=None, mpy=False, work=None):
    """A littlefs2 image of the RAM disk holding `files` [(host path, absolute board path)], built on the host
    and loaded into guest RAM when qemu starts: files reach the board without crossing the emulated UART. With
    mpy=True .py files go as .mpy for `march` (compiled in `work`)."""
    littlefs = _littlefs()
    fs = _lfs(littlefs)
    tmp = None
    try:
        for src, dst in files:
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


def read_disk(image):
    """{absolute board path: bytes} of every file in a RAM-disk image (e.g. dumped from a running board)."""
    littlefs = _littlefs()
    with open(image, "rb") as f:
        data = f.read()
    data = data + bytes(DISK_BLOCK * DISK_BLOCKS - len(data))
    fs = _lfs(littlefs, mount=False)
    fs.context.buffer[:] = data
    fs.mount()
    out = {}
    for root, _, names in fs.walk("/"):
        for n in names:
            p = root.rstrip("/") + "/" + n
            with fs.open(p, "rb") as f:
                out[p] = f.read()
    return out


def build_romfs(folder, image):
    """A ROMFS image of `folder` (files as they are: stage() compiled what had to be compiled), each file's data
    4-byte aligned (kvedge_host.romfs) so that weights can be read in place."""
    from . import romfs
    files = []
    for d, subdirs, names in os.walk(folder):
        subdirs.sort()
        for n in sorted(names):
            p = os.path.join(d, n)
            files.append((p, os.path.relpath(p, folder).replace(os.sep, "/")))
    romfs.write(files, image)
    size = os.path.getsize(image)
    if size > ROMFS_MAX:
        raise DeployError("ROMFS image %s is %d bytes; the board's ROMFS slot holds %d" % (image, size, ROMFS_MAX))
    return image


# -- the board --------------------------------------------------------------------------------------------
class M3Board:
    """One emulated board. start() returns its serial port (a pty); stop() ends qemu.

    heap: bytes (default: the board profile's heap_bytes); romfs: image path for /rom; icount: deterministic
    instruction counting; disk: a RAM-disk image (build_disk) loaded at every start; disk_image: a host file
    holding the board's PSRAM (created when missing), so the RAM disk persists across kill and start like flash
    (use one of the two). Without disk_image a restart (restart()) starts again from the images: what the code
    wrote to the RAM disk is gone."""

    def __init__(self, board="rp2040", heap=None, romfs=None, disk=None, icount=True, log=None, disk_image=None):
        self.board = board
        self.disk_image = os.path.abspath(disk_image) if disk_image else None
        self.heap = heap_of(board, heap)
        self.firmware = firmware_for(self.heap)
        self.romfs = os.path.abspath(romfs) if romfs else None
        self.disk = os.path.abspath(disk) if disk else None
        self.icount = icount
        self.log = log
        self.port = None
        self.proc = None
        self.starts = 0
        self._dir = None

    def command(self):
        machine = MACHINE + (",memory-backend=psram" if self.disk_image else "")
        cmd = [qemu_exe(), "-machine", machine, "-nographic", "-monitor", "null", "-semihosting",
               "-serial", "pty", "-kernel", self.firmware]
        if self.disk_image:  # qemu maps the file: every guest write is in it, whenever qemu dies
            cmd += ["-object", "memory-backend-file,id=psram,size=%d,mem-path=%s,share=on"
                    % (PSRAM_BYTES, self.disk_image)]
        if self.icount:
            cmd += ["-icount", "shift=0"]
        if self.romfs:
            cmd += ["-device", "loader,file=%s,addr=0x%x,force-raw=on" % (self.romfs, ROMFS_ADDR)]
        if self.disk:
            cmd += ["-device", "loader,file=%s,addr=0x%x,force-raw=on" % (self.disk, DISK_ADDR)]
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
        return "%s (%s)" % (MACHINE, os.path.basename(self.firmware))

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
        """Run `code` in a fresh interpreter (soft reset; resume=True keeps the state) with the RAM disk at /
        as cwd; returns what it printed. Raises M3Error with the output when the code raised, and restarts
        qemu when it timed out (Ctrl-C may not stop a runaway program)."""
        try:
            out = self.mpremote(["exec", (MOUNT if mount else "") + code], resume=resume, timeout=timeout)
        except DeployError as e:
            msg = str(e)
            if "timed out" in msg.splitlines()[0]:
                self.restart()
                raise M3Error("timed out after %ds (board restarted)" % timeout, msg)
            raise M3Error(msg.splitlines()[0], msg)
        return out


def instructions(us):
    """Instructions executed in `us` microseconds of ticks_us() under -icount shift=0."""
    return int(round(us * INSTRUCTIONS_PER_US))


def run_code(code, board="rp2040", heap=None, package="mpy", march=None, extra=(), timeout=600, log=None):
    """Run `code` once on a fresh emulated board and return what it printed.

    package: "mpy" (the device package as .mpy for march, default march_for(board)), "py" (as source) or None;
    extra: (host path, board path) pairs added to the ROMFS image (e.g. a model file: open it as '/rom/NAME').
    Time with time.ticks_us() (1 us = 1000 instructions); read heap with gc.mem_alloc()/gc.mem_free().
    Raises M3Missing when the board cannot run here, M3Error when the code fails."""
    why = missing(board, heap)
    if why:
        raise M3Missing(why)
    march = march or march_for(board)
    with tempfile.TemporaryDirectory(prefix="kvedge-m3rom-") as tmp:
        folder = os.path.join(tmp, "rom")
        os.makedirs(folder)
        if package:
            stage_package(folder, march, mpy=(package == "mpy"), extra=extra)
        else:
            stage(folder, extra, march, mpy=False)
            write_disk_module(folder, march)
        image = build_romfs(folder, os.path.join(tmp, "rom.img"))
        with M3Board(board, heap=heap, romfs=image, log=log) as b:
            return b.exec(code, timeout=timeout)
