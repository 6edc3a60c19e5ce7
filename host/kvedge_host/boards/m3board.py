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

qemu runs in its own process group and dies with the thread that started it (kvedge_host.boards.tied).

This module holds the board (M3Board, run_code). Its parts, each in a module of its own: the machines
(kvedge_host.boards.m3machines), which firmware and machine stand for a profile and whether they are here
(m3firmware), the watch for faults and time-outs (m3faults), what is staged onto the board and its disk and ROMFS
images (m3images). Their names are imported here too, so kvedge_host.boards.m3board.X still names each of them."""
import os
import re
import shutil
import signal
import subprocess
import tempfile
import time

from . import tied
from .deploy import mpremote, mpremote_exe
# the parts, under the names callers have always used (m3board.missing, m3board.build_disk, ...)
from .m3machines import (DISK_ADDR, DISK_BLOCK, DISK_BLOCKS, DISK_MODULE, DISK_NAME, FIRMWARE_ENV,  # noqa: F401
                         LAYOUTS, M0, M0_ROMFS_ADDR, M3, M3_FAMILY, M3P4, M3P8, M55, M7, MACHINE, MARCHES, MOUNT,
                         PSRAM_BYTES, PSRAM_LAYOUTS, ROMFS_ADDR, ROMFS_MAX, XT, Layout, disk_module)
from .m3firmware import (ROM_SHARE, M3Missing, fallback_note, firmware_dir, firmware_for,  # noqa: F401
                         firmware_images, heap_of, in_rom, layout_for, m3_heap, m3_images, march_for, missing,
                         psram_layout, qemu_exe, rom_fits, standing_in)
from .m3faults import FAULT, FAULT_QUIET, XT_FAULT, M3Error, M3Fault, fault_report, run_watched  # noqa: F401
from .m3images import (build_disk, build_romfs, compile_to, read_disk, stage, stage_package,  # noqa: F401
                       tree_files, write_disk_module)
from .deploy import DeployError  # noqa: F401

INSTRUCTIONS_PER_US = 1000   # under -icount shift=0
_PTY = re.compile(rb"char device redirected to (/dev/pts/\d+)")


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
            at = "0x%08X" % pc if pc is not None else "?"
            if self.layout.fault != FAULT:
                msg = ("CPU exception on the emulated %s (qemu %s) at PC=%s: the firmware reported it and qemu "
                       "exited (board restarted)" % (self.layout.cpu, self.layout.machine, at))
            else:
                msg = ("HardFault on the emulated %s (qemu %s) at PC=%s: the board hung after its fault report "
                       "(no output for %ds; board restarted)" % (self.layout.cpu, self.layout.machine, at, FAULT_QUIET))
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
