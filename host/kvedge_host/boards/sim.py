"""A virtual board: the real MicroPython unix port behind a pseudo-terminal, heap capped to a board profile
(`kvedge sim --host`; by default `kvedge sim` starts the emulated Cortex-M3 of m3sim.py, see make_board).

Two pseudo-terminals joined by a relay thread:

    client (mpremote, monitor, pyserial) <-> pty B (the port we publish) <-> relay <-> pty A <-> micropython

Why two: the interpreter needs a terminal as stdin/stdout to run its REPL (raw REPL included), and clients need a
device path to open. The relay also lets the board "reset" without the port vanishing, as a USB-serial adapter
would: when the interpreter exits (Ctrl-D, sys.exit, reset()) the relay prints "MPY: soft reboot" like a board
and starts a fresh interpreter in the same filesystem folder; if the old one was in the raw REPL the new one is put
back there, which is exactly what `mpremote soft-reset` (and mpremote without `resume`) expects.

Like a board, the interpreter runs `main.py` from its filesystem at every start (then stays at the REPL).
The relay holds pty B open itself, so output written while no client is attached stays queued in the terminal
(and, when that is full, the interpreter blocks on its write): nothing is dropped between two clients.
Ctrl-C cannot interrupt a running program on this board (the unix port takes SIGINT, not the byte).
"""
import os
import pty
import select
import signal
import subprocess
import sys
import threading
import time
import tty

from .. import profiles
from . import tied
from .ptylink import default_fs, set_nonblocking, write_some
from .runtimes import micropython_bin

RAW_BANNER = b"raw REPL; CTRL-B to exit"
FRIENDLY_PROMPT = b">>> "
SOFT_REBOOT = b"MPY: soft reboot\r\n"
_BUFFER_LIMIT = 1 << 16  # relay stops reading a side whose output is not being taken beyond this

class VirtualBoard:
    """One virtual board. start() returns the port path; stop() ends the interpreter and the relay."""

    kind = "host"

    def describe(self):
        return "MicroPython unix port (64-bit host CPU)"

    def __init__(self, board="rp2040", fs=None, link=None, heap=None, log=None):
        prof = profiles.load(board)
        self.board = board
        self.runtime = prof.get("runtime", "micropython")
        self.heap = int(heap or prof["heap_bytes"])
        self.fs = os.path.abspath(fs or default_fs(board))
        self.link = os.path.abspath(link) if link else None
        self.log = log
        self.port = None
        self.starts = 0  # interpreters that came up so far (1 + resets): counted once each shows its prompt
        self._stop = threading.Event()
        self._ready = threading.Event()
        self._reset_req = threading.Event()
        self._thread = None
        self._child = None
        self._ma = self._mb = self._sb = None
        self._lock = threading.Lock()

    # -- public -------------------------------------------------------------------------------------------
    def start(self, timeout=30):
        os.makedirs(os.path.join(self.fs, "lib"), exist_ok=True)
        self._mb, self._sb = pty.openpty()
        tty.setraw(self._sb)
        self.port = os.ttyname(self._sb)
        set_nonblocking(self._mb)
        self._spawn()
        self._thread = threading.Thread(target=self._relay, name="kvedge-sim-relay", daemon=True)
        self._thread.start()
        if not self._ready.wait(timeout):
            self.stop()
            raise RuntimeError("virtual board: the interpreter printed no prompt within %ds" % timeout)
        if self.link:
            tmp = self.link + ".tmp%d" % os.getpid()
            if os.path.lexists(tmp):
                os.unlink(tmp)
            os.symlink(self.port, tmp)
            os.replace(tmp, self.link)
        return self.port

    def reset(self):
        """Hard-reset the board: the interpreter is killed and a fresh one starts (main.py runs again)."""
        self._reset_req.set()

    def stop(self):
        # The link goes first, while our pty still holds its number: once the pty is closed the kernel may give
        # /dev/pts/N to someone else, and a monitor reopening the link must not land on their terminal.
        if self.link and os.path.islink(self.link) and os.readlink(self.link) == self.port:
            try:
                os.unlink(self.link)
            except OSError:
                pass
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)
        self._kill_child()
        for fd in (self._ma, self._mb, self._sb):
            if fd is not None:
                try:
                    os.close(fd)
                except OSError:
                    pass
        self._ma = self._mb = self._sb = None

    def __enter__(self):
        self.start()
        return self

    def __exit__(self, *exc):
        self.stop()

    # -- interpreter --------------------------------------------------------------------------------------
    def _spawn(self):
        ma, sa = pty.openpty()
        # The unix port only switches its terminal to raw mode while it edits a line: a cooked terminal
        # would eat Ctrl-A/C/D, which the raw REPL protocol sends as bytes.
        tty.setraw(sa)
        # tied: the interpreter dies with the relay thread that started it (the relay restarts it while the
        # board runs), so no MicroPython is left running if the simulator is killed
        env = dict(os.environ)
        env.pop("KVEDGE_KERNELS", None)
        if self.runtime == "circuitpython":
            cmd = self._circuitpython(env)
        else:
            cmd = [micropython_bin(), "-X", "heapsize=%d" % self.heap]
            if os.path.exists(os.path.join(self.fs, "main.py")):
                cmd += ["-i", "main.py"]
            env["MICROPYPATH"] = ":.frozen:" + os.path.join(self.fs, "lib")
        self._child = tied.popen(cmd, stdin=sa, stdout=sa, stderr=sa, cwd=self.fs, env=env)
        os.close(sa)
        set_nonblocking(ma)
        self._ma = ma
        self._booting = True  # until its prompt is out on the port (see _boot_done)
        self._seen = b""
        self._born = time.monotonic()

    def _circuitpython(self, env):
        """A CircuitPython board (a profile whose runtime is circuitpython): the real CircuitPython (its unix build)
        with the folder as its CIRCUITPY drive: code.py runs at every start, lib/ is on the path, boot_out.txt is
        written as a board writes it, and settings.toml is read into the environment (a board's os.getenv reads
        that file; this build's reads the environment)."""
        from .runtimes import RuntimeMissing, circuitpython_bin, circuitpython_path
        exe = circuitpython_bin()
        if not exe:
            raise RuntimeMissing("no CircuitPython binary at %s" % circuitpython_path())
        if not getattr(self, "_cp_version", None):
            p = subprocess.run([exe, "-c", "import sys; print('%d.%d.%d' % sys.implementation.version[:3])"],
                               capture_output=True, text=True, timeout=30)
            self._cp_version = p.stdout.strip() or "0.0.0"
        with open(os.path.join(self.fs, "boot_out.txt"), "w") as f:
            f.write("Adafruit CircuitPython %s on unix; kvedge virtual board (CircuitPython unix port) with %d bytes "
                    "of heap\nBoard ID:kvedge_virtual_%s\n" % (self._cp_version, self.heap, self.board))
        env["MICROPYPATH"] = ":%s:%s" % (self.fs, os.path.join(self.fs, "lib"))
        env.update(settings_env(os.path.join(self.fs, "settings.toml")))
        cmd = [exe, "-X", "heapsize=%d" % self.heap]
        if os.path.exists(os.path.join(self.fs, "code.py")):
            cmd += ["-i", "code.py"]
        return cmd

    def _kill_child(self):
        tied.kill(self._child)

    def _restart(self, raw):
        if self._ma is not None:
            os.close(self._ma)
            self._ma = None
        self._kill_child()
        if time.monotonic() - self._born < 0.5:
            time.sleep(0.5)  # an interpreter that dies at once must not spin the CPU
        if self._stop.is_set():
            return b""
        self._spawn()
        self._boot_raw = raw
        if self.log:
            self.log("interpreter restarted (%d)" % (self.starts + 1))
        return b"\x01" if raw else b""

    def _boot_done(self, to_client):
        """A restarted interpreter is up (and counted in `starts`) once the prompt of the mode it was put in is out
        on the port: the raw REPL's banner and ">" after the Ctrl-A the relay sent it, or the friendly prompt;
        or, when it has shown no prompt at all for 2 s, a main.py at work. Counting it at its spawn let a client
        that waited for `starts` connect while it was still booting: the client's own Ctrl-A then met the relay's,
        the board printed two raw banners, the first one after the client had flushed its input, and mpremote
        read the second banner's bytes where its raw-paste answer should be ("could not exec command (response:
        b'R\\x01')")."""
        if to_client:  # not yet on the port: a client starting now would not find it to flush
            return False
        if self._prompted:
            return self._prompted >= (2 if self._boot_raw else 1)
        return time.monotonic() - self._born > 2

    # -- relay --------------------------------------------------------------------------------------------
    def _relay(self):
        to_client = bytearray()
        to_interp = bytearray()
        raw = False
        tail = b""  # last output bytes, to tell the REPL mode and the prompt
        self._boot_raw = False
        self._prompted = 0  # the prompts the booting interpreter has shown: 0 none, 1 friendly, 2 raw
        while not self._stop.is_set():
            if self._reset_req.is_set():
                self._reset_req.clear()
                to_client += SOFT_REBOOT
                to_interp[:0] = self._restart(False)
                raw = False
                tail = b""
                self._prompted = 0
                continue
            ma, mb = self._ma, self._mb
            rl, wl = [], []
            if len(to_client) < _BUFFER_LIMIT:
                rl.append(ma)
            if len(to_interp) < _BUFFER_LIMIT:
                rl.append(mb)
            if to_client:
                wl.append(mb)
            if to_interp:
                wl.append(ma)
            try:
                r, w, _ = select.select(rl, wl, [], 0.2)
            except (OSError, ValueError):
                r, w = [], []
            dead = False
            if ma in r:
                try:
                    data = os.read(ma, 4096)
                    if not data:
                        dead = True
                except BlockingIOError:
                    data = b""
                except OSError:
                    data, dead = b"", True
                if data:
                    to_client += data
                    seen = tail + data  # the patterns may straddle two reads
                    tail = seen[-64:]
                    if RAW_BANNER in tail:
                        raw = True
                    elif tail.endswith(FRIENDLY_PROMPT):
                        raw = False
                    if self._booting:
                        if RAW_BANNER + b"\r\n>" in seen:
                            self._prompted = 2
                        elif FRIENDLY_PROMPT in seen and not self._prompted:
                            self._prompted = 1
            if mb in r:
                try:
                    data = os.read(mb, 4096)
                except OSError:
                    data = b""
                to_interp += data
            if mb in w and to_client:
                n = write_some(mb, to_client)
                del to_client[:n]
            if ma in w and to_interp and not dead:
                n = write_some(ma, to_interp)
                if n < 0:
                    dead = True
                else:
                    del to_interp[:n]
            if self._booting and self._boot_done(to_client):
                self._booting = False
                self.starts += 1
                self._ready.set()  # start() returns: the first boot is counted
            if not dead and self._child.poll() is not None:
                # exited: drain what it printed, then treat as dead
                try:
                    while True:
                        d = os.read(ma, 4096)
                        if not d:
                            break
                        to_client += d
                except OSError:
                    pass
                dead = True
            if dead and not self._stop.is_set():
                to_client += SOFT_REBOOT
                to_interp[:0] = self._restart(raw)
                tail = b""
                self._prompted = 0


def settings_env(path):
    """CircuitPython's settings.toml as environment variables (its strings and integers, as text)."""
    import tomllib
    try:
        with open(path, "rb") as f:
            doc = tomllib.load(f)
    except (OSError, tomllib.TOMLDecodeError):
        return {}
    return {k: str(v) for k, v in doc.items() if isinstance(v, (str, int)) and not isinstance(v, bool)}


def make_board(board="rp2040", fs=None, link=None, heap=None, log=None, host=False, rom=None):
    """The virtual board `kvedge sim` starts: the emulated board that stands for the profile (kvedge_host.boards.m3sim:
    32-bit, float32, the profile's heap, on the machine m3board.layout_for picks) where qemu and its firmware
    image are here, else (or with host=True) the unix port. Returns (board object, None or why the emulated board
    is not used). heap None: the profile's, or (a heap no image has) the image m3board.m3_heap picks."""
    why = "--host" if host else None
    if not host:
        from . import m3board
        m3heap, note = heap, None
        if heap is None:
            # a profile whose heap no image has (rp2350-psram8's 8,849,408 bytes): the image its footprint was
            # measured on, as kvedge demo and the plans made for it use
            prof = profiles.load(board)
            img = m3board.m3_heap(prof, board)
            if img is not None and img != prof["heap_bytes"]:
                m3heap = img
                note = ("no image with the profile's %s-byte heap: the emulated board runs the %s-byte one, the heap "
                        "its footprint was measured on (plan for it with kvedge plan --heap %d)" % (
                            format(prof["heap_bytes"], ","), format(img, ","), img))
        why = m3board.missing(board, m3heap, m3board.layout_for(board, m3heap))
        if why is None:
            from .m3sim import M3Sim
            if note and log:
                log(note)
            stand = m3board.fallback_note(board, m3board.heap_of(board, m3heap))
            if stand and log:
                log(stand)
            return M3Sim(board, fs=fs, link=link, heap=m3heap, log=log, rom=rom), None
    return VirtualBoard(board, fs=fs, link=link, heap=heap, log=log), why


class SimProcess:
    """`kvedge sim` as a child process (what tests use to kill a board outright and start it again)."""

    def __init__(self, board="rp2040", fs=None, link=None, timeout=120, host=False):
        cmd = [sys.executable, "-m", "kvedge_host.cli", "sim", "--board", board] + (["--host"] if host else [])
        if fs:
            cmd += ["--fs", fs]
        if link:
            cmd += ["--link", link]
        env = dict(os.environ)
        host = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # host/
        device = os.path.join(os.path.dirname(host), "device")
        env["PYTHONPATH"] = os.pathsep.join([host, device] + [p for p in [env.get("PYTHONPATH")] if p])
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env,
                                     start_new_session=True)
        self.link = link
        self.port = self._read_port(timeout)

    def _read_port(self, timeout):
        end = time.monotonic() + timeout
        line = b""
        fd = self.proc.stdout.fileno()
        while time.monotonic() < end and not line.endswith(b"\n"):
            r, _, _ = select.select([fd], [], [], 0.5)
            if r:
                c = os.read(fd, 1)
                if not c:
                    break
                line += c
        port = line.decode().strip()
        if not port.startswith("/"):
            err = b""
            self.kill()
            try:
                err = self.proc.stderr.read()
            except Exception:
                pass
            raise RuntimeError("kvedge sim did not print its port: %r %s" % (line, err.decode(errors="replace")))
        return port

    def kill(self, sig=signal.SIGKILL):
        """Kill the simulator outright (its interpreter dies with it): the port vanishes. After SIGKILL the
        --link symlink is left dangling, and the kernel may soon give its /dev/pts number to another program:
        to make a port vanish for a reader of the link, use stop() (SIGTERM: the link goes first)."""
        if self.proc.poll() is None:
            try:
                os.killpg(self.proc.pid, sig)
            except OSError:
                pass
        try:
            self.proc.wait(15)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        for f in (self.proc.stdout, self.proc.stderr):
            try:
                f.close()
            except Exception:
                pass

    def stop(self):
        self.kill(signal.SIGTERM)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.stop()
