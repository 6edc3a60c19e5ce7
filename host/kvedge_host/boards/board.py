"""A board at a serial port (a real one on USB, or a virtual board's pty): what it is, whether a profile describes
it, and watching a generation on it.

probe() runs tools/board_probe.py there through mpremote (which interrupts whatever the board was running and
soft-resets it); check_profile() refuses a profile the board cannot be, before anything is deployed: another
runtime (CircuitPython vs MicroPython), machine code it cannot load (-march), or less heap than the profile plans
for. watch() reads the port while the board generates: the text, the stats stream (kvedge.monitor) and the
closing #KVEDGE summary; a board that resets or vanishes midway ends the watch with BoardReset."""
import json
import os
import time

from .. import profiles
from .deploy import THUMB_ARCHS, DeployError, mpremote
from ..paths import TOOLS

PROBE = os.path.join(TOOLS, "board_probe.py")
# Arm cores run every .mpy arch up to their own (MicroPython's persistentcode: armv6m < armv7m < armv7em < ..)
ARM = THUMB_ARCHS
HEAP_SLACK = 0.9  # a board with less than this share of the profile's heap is not the profile's board
SUMMARY = "#KVEDGE "
_RESET_MARKS = ("MPY: soft reboot", "soft reboot\r", "Type \"help()\" for more information")


class BoardReset(RuntimeError):
    """The board reset or vanished while it was generating."""


def probe(port, timeout=120):
    """The board's own figures (tools/board_probe.py's JSON line): impl, version, machine, mpy_march,
    heap_usable, heap_free, small_int_bits, float."""
    out = mpremote(port, ["run", PROBE], resume=False, timeout=timeout)
    for line in out.splitlines():
        line = line.strip()
        if line.startswith("{") and '"impl"' in line:
            return json.loads(line)
    raise DeployError("the board at %s did not answer the probe (tools/board_probe.py):\n%s" % (port, out[-1500:]))


def loads_arch(board_arch, march):
    """True when a board whose firmware reports `board_arch` loads .mpy machine code for `march`."""
    if march == board_arch:
        return True
    if board_arch in ARM and march in ARM:
        return ARM.index(march) <= ARM.index(board_arch)
    return False


def check_profile(info, prof, march=None):
    """Refuse (DeployError) a profile that does not describe the probed board; march: the -march the deploy
    will compile for (the profile's unless overridden), None for bytecode-only files."""
    want = prof.get("runtime", "micropython")
    name = prof["name"]
    if info["impl"] != want:
        raise DeployError("the board runs %s %s (%s), but --board %s is a %s profile" % (
            info["impl"], info["version"], info["machine"], name, want))
    if march and not loads_arch(info["mpy_march"], march):
        raise DeployError("the board (%s) loads .mpy machine code for %s, not %s (--board %s): is --board right "
                          "for this chip?" % (info["machine"], info["mpy_march"] or "no architecture", march,
                                               name))
    heap = info.get("heap_usable")
    if isinstance(heap, int) and heap < HEAP_SLACK * prof["heap_bytes"]:
        raise DeployError("the board (%s) has %s bytes of heap, --board %s plans for %s: its plans would not fit; "
                          "use this board's profile (kvedge boards)" % (
                              info["machine"], format(heap, ","), name, format(prof["heap_bytes"], ",")))


class Attached:
    """The board at --port as the demo and generate use a started virtual board: port, heap, kind, describe();
    entering and leaving it starts and stops nothing."""

    kind = "port"

    def __init__(self, port, board, info=None):
        self.port = port
        self.board = board
        self.heap = profiles.load(board)["heap_bytes"]
        self.info = info

    def describe(self):
        i = self.info or {}
        return "%s %s on %s" % (i.get("impl", "a board"), i.get("version", ""), i.get("machine", "?"))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        pass


class Capture:
    """What the board prints besides stats lines: the generated text, errors, resets and the #KVEDGE summary.
    on_text(str) gets the text as it comes."""

    def __init__(self, on_text=None):
        self.text = []
        self.summary = None
        self.error = []
        self.reset = None
        self.on_text = on_text

    def line(self, raw):
        from kvedge import telemetry
        if self.summary is not None or self.reset:
            return  # the board is back at its prompt, or started again
        i = raw.find(telemetry.PREFIX)
        body = raw if i < 0 else raw[:i]  # text written just before a stats line shares its line
        if any(m in body for m in _RESET_MARKS):
            self.reset = body.strip()
            return
        if body.startswith(SUMMARY):
            try:
                self.summary = json.loads(body[len(SUMMARY):])
            except ValueError:
                self.error.append(body)
            return
        if "Error" in body or "Traceback" in body:
            self.error.append(body)
        # a stats line ends the line it lands in; the text itself had no newline there
        piece = body if i >= 0 else body + "\n"
        self.text.append(piece)
        if self.on_text:
            self.on_text(piece)


def watch(port, csv_path=None, timeout=600, on_tick=None, on_text=None, on_note=None, on_stats=None, mon=None):
    """Read the port until the board's #KVEDGE summary, an error, a reset or `timeout` seconds. Returns
    (text, summary dict, Monitor). Raises BoardReset when the board restarted or the port vanished before the
    summary (the tokens that came are in the exception's .text), RuntimeError on an error or a timeout."""
    from kvedge.telemetry import PREFIX
    from .monitor import Monitor
    cap = Capture(on_text)
    mon = mon or Monitor(csv_path=csv_path, on_note=on_note)
    feed_line = mon.line

    def line(text):
        cap.line(text)
        if on_stats and PREFIX in text and cap.reset is None:
            on_stats(text[text.find(PREFIX):].rstrip())
        return feed_line(text)

    mon.line = line
    t_end = time.monotonic() + timeout

    def gone():
        return mon.counts["disconnects"] > 0 or mon.counts["sessions"] > 1 or cap.reset is not None

    def stop():
        return cap.summary is not None or bool(cap.error and "Error" in cap.error[-1]) or gone() \
            or time.monotonic() > t_end

    mon.run(port, should_stop=stop, on_tick=on_tick, retry_s=0.2)
    mon.close()
    text = "".join(cap.text)
    if cap.summary is None:
        if gone():
            why = cap.reset or ("the port vanished" if mon.counts["disconnects"] else "its stats restarted at seq 1")
            seen = mon.samples[-1]["tokens_seen"] if mon.samples else 0
            e = BoardReset("the board reset during the generation (%s), after %s tokens; the run stopped"
                           % (why, seen))
            e.text = text
            raise e
        msg = cap.error[-1] if cap.error else "no summary within %gs" % timeout
        raise RuntimeError("the generation on the board did not finish: %s" % msg.strip())
    return text, cap.summary, mon
