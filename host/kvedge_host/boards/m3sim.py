"""The emulated board as a virtual board (`kvedge sim --board B`): qemu behind a relay that makes it behave like
a board with a flash filesystem. The machine is the one that stands for the profile (kvedge_host.boards.m3board.layout_for:
the Cortex-M0 for the rp2040, the single-precision Cortex-M7 for the rp2350, the Xtensa lx106 for the esp32 and
esp32s3, else the Cortex-M3).

    client (mpremote, monitor, pyserial) <-> pty B (the port we publish) <-> relay <-> qemu's pty <-> MicroPython

The firmware mounts no filesystem and runs neither boot.py nor main.py. So at power-on and after every soft reset
the relay holds the board's output, enters the raw REPL itself, mounts the RAM disk at / and runs boot.py, and at
power-on (or after a soft reset from the friendly REPL) main.py, as a board's own start-up code would; then the
client sees the prompt it waits for. Output written while no client is attached stays queued (the relay holds pty
B open), and the port survives hard resets, as a USB-serial adapter's would.

The board's flash is the --fs folder: its files become a littlefs2 image built on the host and loaded into the
RAM-disk region when qemu starts (nothing crosses the emulated UART, which is slow for model files), and the
region is written back to the folder (qemu's memsave over QMP) when the board stops or is hard-reset. A board
killed outright loses what it wrote since it started, like a board that lost power before a flush."""
import errno
import json
import os
import pty
import select
import shutil
import socket
import subprocess
import tempfile
import threading
import time
import tty

from . import board_scripts, m3board, tied
from .ptylink import default_fs, set_nonblocking, write_some

RAW_BANNER = b"raw REPL; CTRL-B to exit\r\n>"
FRIENDLY_PROMPT = b">>> "
SOFT_REBOOT = b"MPY: soft reboot\r\n"
PRIME_DONE = b"KVPRIMED"
_BUFFER_LIMIT = 1 << 16
_PRIME_TIMEOUT = 30  # seconds of host time for the board to answer during start-up

# Runs in the raw REPL after each reset (after the machine's mount code: its /rom, the flash at / as cwd):
# boot.py, and whether there is a main.py.
PRIME_CODE = board_scripts.source("m3_prime")


class M3Sim:
    """One emulated board with a persistent filesystem folder. start() returns the port path; stop() saves the
    filesystem to the folder and ends qemu; reset() is a hard reset (the filesystem is kept)."""

    kind = "m3"

    def __init__(self, board="rp2040", fs=None, link=None, heap=None, log=None, rom=None, layout=None):
        self.board = board
        self.heap = m3board.heap_of(board, heap)
        # the machine that stands for the profile (the rp2040's Cortex-M0, the rp2350's Cortex-M7, else the M3)
        self.layout = layout or m3board.layout_for(board, self.heap)
        self.march = m3board.march_for(board, self.layout)
        self.firmware = m3board.firmware_for(self.heap, self.layout)
        self.fs = os.path.abspath(fs or default_fs(board))
        self.link = os.path.abspath(link) if link else None
        self.rom = os.path.abspath(rom) if rom else None
        self.log = log
        self.port = None
        self.starts = 0
        self.error = None
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._reset_req = threading.Event()
        self._thread = None
        self._qemu = None
        self._qa = None          # our end of qemu's pty
        self._mb = self._sb = None
        self._dir = None
        self._snapshot = {}      # board path -> bytes at start, to tell what the board changed
        self._pending = b""

    def describe(self):
        return "emulated %s (qemu %s, %s)" % (self.layout.cpu, self.layout.machine, os.path.basename(self.firmware))

    # -- public -------------------------------------------------------------------------------------------
    def start(self, timeout=120):
        os.makedirs(self.fs, exist_ok=True)
        self._dir = tempfile.mkdtemp(prefix="kvedge-m3sim-")
        self._disk = os.path.join(self._dir, "disk.img")
        self._snapshot = _folder_files(self.fs)
        m3board.build_disk(self._disk, [(os.path.join(self.fs, p[1:]), p) for p in sorted(self._snapshot)],
                           layout=self.layout)
        romdir = os.path.join(self._dir, "rom")
        if self.rom:
            shutil.copytree(self.rom, romdir)
        else:
            os.makedirs(romdir)
        m3board.write_disk_module(romdir, self.march, self.layout)
        self._romfs = m3board.build_romfs(romdir, os.path.join(self._dir, "rom.img"), self.layout)
        self._mb, self._sb = pty.openpty()
        tty.setraw(self._sb)
        self.port = os.ttyname(self._sb)
        set_nonblocking(self._mb)
        self._thread = threading.Thread(target=self._relay, name="kvedge-m3sim-relay", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout) or self.error:
            err = self.error or "no prompt within %ds" % timeout
            self.stop()
            raise RuntimeError("emulated board did not start: %s" % err)
        if self.link:
            tmp = self.link + ".tmp%d" % os.getpid()
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(self.port, tmp)
            os.replace(tmp, self.link)
        return self.port

    def reset(self):
        """Hard reset: qemu starts again from the board's current filesystem (main.py runs again)."""
        self._reset_req.set()

    def stop(self):
        if self.link and os.path.islink(self.link) and os.readlink(self.link) == self.port:
            try:
                os.unlink(self.link)
            except OSError:
                pass
        self._stop.set()
        if self._thread is not None:
            self._thread.join(60)
            self._thread = None
        tied.kill(self._qemu)   # only if the relay could not end it
        for fd in (self._qa, self._mb, self._sb):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._qa = self._mb = self._sb = None
        if self._dir:
            shutil.rmtree(self._dir, ignore_errors=True)
            self._dir = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- qemu ---------------------------------------------------------------------------------------------
    def _spawn(self):
        self._qmp_path = os.path.join(self._dir, "qmp.sock")
        if os.path.exists(self._qmp_path):
            os.unlink(self._qmp_path)
        lay = self.layout
        cmd = [m3board.qemu_exe(lay), "-machine", lay.machine] + lay.qemu_args + ["-nographic", "-monitor", "null",
               "-qmp", "unix:%s,server=on,wait=off" % self._qmp_path, "-semihosting", "-serial", "pty",
               "-kernel", self.firmware, "-icount", "shift=0",
               "-device", "loader,file=%s,addr=0x%x,force-raw=on" % (self._romfs, lay.romfs_addr),
               "-device", "loader,file=%s,addr=0x%x,force-raw=on" % (self._disk, lay.disk_addr)]
        logpath = os.path.join(self._dir, "qemu.log")
        with open(logpath, "wb") as logf:
            # tied to this relay thread; cwd = the board's folder (tests find the board by it)
            self._qemu = tied.popen(cmd, stdin=subprocess.DEVNULL, stdout=logf, stderr=subprocess.STDOUT,
                                    cwd=self.fs)
        end = time.monotonic() + 30
        while True:
            with open(logpath, "rb") as f:
                m = m3board._PTY.search(f.read())
            if m:
                break
            if self._qemu.poll() is not None or time.monotonic() > end:
                raise RuntimeError("qemu did not start: %s" % open(logpath, "rb").read().decode(errors="replace"))
            time.sleep(0.02)
        qa = os.open(m.group(1).decode(), os.O_RDWR | os.O_NOCTTY)
        tty.setraw(qa)
        set_nonblocking(qa)
        self._qa = qa
        self.starts += 1
        if self.log:
            self.log("board started (%d): qemu pid %d on %s" % (self.starts, self._qemu.pid, m.group(1).decode()))

    def _qmp(self, *commands):
        s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        s.settimeout(30)
        s.connect(self._qmp_path)
        f = s.makefile("rwb")
        try:
            f.readline()  # greeting
            for c in ({"execute": "qmp_capabilities"},) + commands:
                f.write(json.dumps(c).encode() + b"\n")
                f.flush()
                while True:
                    reply = json.loads(f.readline())
                    if "return" in reply:
                        break
                    if "error" in reply:
                        raise RuntimeError("qmp %s: %s" % (c["execute"], reply["error"]))
        finally:
            f.close()
            s.close()

    def _save_disk(self):
        """The RAM disk as it is now, into self._disk (the image the next start loads) and the --fs folder."""
        if self._qemu is None or self._qemu.poll() is not None:
            return False
        dump = self._disk + ".dump"
        try:
            # memsave reads through the CPU's view of memory (the same addresses: an M-profile core has no MMU);
            # pmemsave reads the machine's system bus, which on the microbit machine does not hold the SRAM
            self._qmp({"execute": "stop"},
                      {"execute": "memsave", "arguments": {"val": self.layout.disk_addr,
                                                           "size": m3board.DISK_BLOCK * self.layout.disk_blocks,
                                                           "filename": dump, "cpu-index": 0}})
            files = m3board.read_disk(dump, self.layout)
        except (OSError, ValueError, RuntimeError) as e:
            if self.log:
                self.log("could not save the board's filesystem: %s" % e)
            return False
        os.replace(dump, self._disk)
        _sync_folder(self.fs, self._snapshot, files)
        self._snapshot = files
        return True

    def _kill_qemu(self):
        if self._qa is not None:
            os.close(self._qa)
            self._qa = None
        tied.kill(self._qemu)
        self._qemu = None

    # -- start-up -----------------------------------------------------------------------------------------
    def _read_until(self, buf, markers, timeout, poke=None):
        """Read the board until one of `markers` is in buf; returns (buf, marker or None). `poke` is sent
        every second while waiting (to wake a board whose prompt was printed before we listened)."""
        end = time.monotonic() + timeout
        next_poke = time.monotonic()
        while True:
            for mk in markers:
                if mk in buf:
                    return buf, mk
            now = time.monotonic()
            if now > end or self._stop.is_set():
                return buf, None
            if poke and now >= next_poke:
                os.write(self._qa, poke)
                next_poke = now + 1.0
            r, _, _ = select.select([self._qa], [], [], 0.1)
            if r:
                try:
                    buf += os.read(self._qa, 4096)
                except BlockingIOError:
                    pass
                except OSError:
                    return buf, None

    def _send(self, data):
        while data:
            try:
                n = os.write(self._qa, data)
                data = data[n:]
            except BlockingIOError:
                select.select([], [self._qa], [], 0.1)

    def _prime(self, buf, power_on):
        """Bring a board that just (re)started to where its firmware would: flash mounted, boot.py run, and at
        power-on or after a friendly-REPL soft reset main.py started. Returns (bytes for the client, state)."""
        poke = b"\r\x03" if power_on else None
        buf, mk = self._read_until(buf, (RAW_BANNER, FRIENDLY_PROMPT), _PRIME_TIMEOUT, poke)
        if mk is None:
            raise RuntimeError("the board did not show a prompt: %r" % buf[-200:])
        friendly = power_on or mk == FRIENDLY_PROMPT
        if mk == FRIENDLY_PROMPT or power_on:
            self._send(b"\x01")
            buf, mk = self._read_until(b"", (RAW_BANNER,), _PRIME_TIMEOUT)
            if mk is None:
                raise RuntimeError("the board did not enter the raw REPL: %r" % buf[-200:])
        self._send((self.layout.mount + PRIME_CODE).encode() + b"\x04")
        buf, mk = self._read_until(b"", (b"\x04>",), _PRIME_TIMEOUT)
        if mk is None or not buf.startswith(b"OK"):
            raise RuntimeError("start-up code did not run: %r" % buf[-300:])
        out, err = buf[2:].split(b"\x04")[:2]
        shown = b"".join(ln for ln in out.splitlines(True) if not ln.startswith(PRIME_DONE))
        if err:
            shown += err  # boot.py failed: a board prints that too
        has_main = PRIME_DONE + b" True" in out
        if friendly and has_main:
            self._send(b"exec(open('main.py').read())\x04")
            return shown, "main-ok"
        if friendly:
            self._send(b"\x02")  # back to the friendly REPL: its banner and prompt go to the client
            return shown, "pass"
        return shown + RAW_BANNER, "pass"

    # -- relay --------------------------------------------------------------------------------------------
    def _boot(self):
        self._spawn()
        return self._prime(b"", power_on=True)

    def _relay(self):
        to_client = bytearray()
        to_board = bytearray()
        try:
            shown, state = self._boot()
        except Exception as e:
            self.error = str(e)
            self._ready.set()
            self._kill_qemu()
            return
        to_client += shown
        self._ready.set()
        tail = b""
        try:
            while not self._stop.is_set():
                if self._reset_req.is_set():
                    self._reset_req.clear()
                    self._save_disk()
                    self._kill_qemu()
                    to_client += SOFT_REBOOT
                    shown, state = self._boot()
                    to_client += shown
                    tail = b""
                    continue
                qa, mb = self._qa, self._mb
                rl, wl = [], []
                if len(to_client) < _BUFFER_LIMIT:
                    rl.append(qa)
                if len(to_board) < _BUFFER_LIMIT:
                    rl.append(mb)
                if to_client:
                    wl.append(mb)
                if to_board:
                    wl.append(qa)
                r, w, _ = select.select(rl, wl, [], 0.2)
                dead = False
                if qa in r:
                    try:
                        data = os.read(qa, 4096)
                        dead = not data
                    except BlockingIOError:
                        data = b""
                    except OSError:
                        data, dead = b"", True
                    if data:
                        data, state = self._filter(data, state)
                        seen = tail + data
                        i = seen.find(SOFT_REBOOT)
                        if i >= 0:
                            cut = i + len(SOFT_REBOOT) - len(tail)
                            to_client += data[:cut]
                            n = write_some(mb, to_client)  # the client waits for "soft reboot" (10 s)
                            if n > 0:
                                del to_client[:n]
                            shown, state = self._prime(data[cut:], power_on=False)
                            to_client += shown
                            tail = b""
                        else:
                            to_client += data
                            tail = seen[-len(SOFT_REBOOT):]
                if mb in r:
                    try:
                        got = os.read(mb, 4096)
                    except OSError:
                        got = b""
                    if got:
                        to_board += got
                        state = "pass"  # a client talks to the board: main.py's framing is theirs now
                if mb in w and to_client:
                    n = write_some(mb, to_client)
                    if n > 0:
                        del to_client[:n]
                if qa in w and to_board and not dead:
                    n = write_some(qa, to_board)
                    if n < 0:
                        dead = True
                    elif n:
                        del to_board[:n]
                if dead or (self._qemu is not None and self._qemu.poll() is not None):
                    # qemu ended (a crash, or the guest asked it to exit): power the board up again
                    self._kill_qemu()
                    if self._stop.is_set():
                        break
                    to_client += SOFT_REBOOT
                    shown, state = self._boot()
                    to_client += shown
                    tail = b""
        except Exception as e:
            self.error = str(e)
            if self.log:
                self.log("relay stopped: %s" % e)
        finally:
            self._save_disk()
            self._kill_qemu()

    def _filter(self, data, state):
        """main.py runs in the raw REPL: drop its framing (the leading OK, the end markers) so the client sees
        what a board's main.py prints, then return the board to the friendly REPL."""
        if state == "main-ok":
            data = self._pending + data
            if len(data) < 2:
                self._pending = data
                return b"", state
            self._pending = b""
            data = data[2:] if data.startswith(b"OK") else data
            state = "main"
        if state == "main":
            i = data.find(b"\x04")
            if i < 0:
                return data, state
            rest = data[i + 1:]
            j = rest.find(b"\x04")
            if j < 0:
                return data[:i] + rest, "main-err"
            self._send(b"\x02")
            return data[:i] + rest[:j], "pass"
        if state == "main-err":
            j = data.find(b"\x04")
            if j < 0:
                return data, state
            self._send(b"\x02")
            return data[:j], "pass"
        return data, state


def _folder_files(folder):
    """{board path: bytes} of every file under the folder."""
    out = {}
    for d, subdirs, names in os.walk(folder):
        subdirs.sort()
        for n in sorted(names):
            p = os.path.join(d, n)
            if os.path.isfile(p):
                with open(p, "rb") as f:
                    out["/" + os.path.relpath(p, folder).replace(os.sep, "/")] = f.read()
    return out


def _sync_folder(folder, before, after):
    """Write the board's changes to the host folder: files it wrote, and removals of files it had at start
    (a file changed on the host meanwhile is left alone)."""
    for path, data in after.items():
        if before.get(path) == data:
            continue
        dst = os.path.join(folder, path[1:])
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        with open(dst, "wb") as f:
            f.write(data)
    for path, data in before.items():
        if path in after:
            continue
        dst = os.path.join(folder, path[1:])
        try:
            with open(dst, "rb") as f:
                same = f.read() == data
            if same:
                os.remove(dst)
        except OSError as e:
            if e.errno != errno.ENOENT:
                raise
