"""A command talking to an emulated board, watched as it runs: the firmware's HardFault report (after which the
board hangs and mpremote would wait for ever) and time-outs. M3Error: code on the board failed or timed out;
M3Fault: it took a HardFault."""
import os
import re
import select
import subprocess
import time

FAULT = "HardFault exception caught"   # what the firmware prints on a HardFault (then it spins for ever)
FAULT_QUIET = 3              # seconds of silence after a fault report that mean the board hangs


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


XT_FAULT = "FATAL: Xtensa"  # what the Xtensa firmware prints on a CPU exception (then qemu exits)
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

