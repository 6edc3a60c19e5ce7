"""Child processes that cannot outlive us: an emulator or interpreter left running after a crash would hold its
port and a CPU core.

The command is started through a small Python shim that sets PR_SET_PDEATHSIG (SIGKILL) and then execs it:
the flag survives exec and fires when the thread that started the child ends, so even a SIGKILL of this process
takes the child with it. The child also gets its own session (process group) so stop() can kill all of it."""
import os
import signal
import subprocess
import sys

_SHIM = ("import ctypes, os, signal, sys\n"
         "try:\n"
         "    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)\n"
         "except Exception:\n"
         "    pass\n"
         "if os.getppid() != int(sys.argv[1]):\n"
         "    sys.exit(1)\n"
         "os.execv(sys.argv[2], sys.argv[2:])\n")


def popen(cmd, **kw):
    """subprocess.Popen(cmd) in its own session, killed when the calling thread (or this process) ends.

    Start it from a thread that lives as long as the child should (the main thread, or a relay thread)."""
    kw.setdefault("close_fds", True)
    return subprocess.Popen([sys.executable, "-c", _SHIM, str(os.getpid())] + list(cmd),
                            start_new_session=True, **kw)


def kill(proc, timeout=10):
    """SIGKILL the child's whole process group and reap it."""
    if proc is None:
        return
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except OSError:
            try:
                proc.kill()
            except OSError:
                pass
    try:
        proc.wait(timeout)
    except subprocess.TimeoutExpired:
        pass
