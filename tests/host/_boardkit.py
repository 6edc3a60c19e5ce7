"""Helpers for the board-in-the-loop tests (virtual boards, mpremote, the kvedge CLI as a subprocess)."""
import os
import subprocess
import sys
import time

from kvedge_host.paths import DEVICE, ROOT, venv_tool

HOST = os.path.join(ROOT, "host")


def env():
    e = dict(os.environ)
    e["PYTHONPATH"] = os.pathsep.join([HOST, DEVICE] + [p for p in [e.get("PYTHONPATH")] if p])
    return e


def kvedge(*args, timeout=300):
    """Run the kvedge CLI in a fresh process; returns CompletedProcess with text stdout/stderr."""
    return subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + [str(a) for a in args],
                          stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=ROOT,
                          timeout=timeout)


def kvedge_bg(*args):
    return subprocess.Popen([sys.executable, "-m", "kvedge_host.cli"] + [str(a) for a in args],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env(), cwd=ROOT,
                            start_new_session=True)


def mpremote(port, *args, resume=True, timeout=120):
    cmd = [venv_tool("mpremote"), "connect", port] + (["resume"] if resume else []) + list(args)
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=timeout)
    assert p.returncode == 0, "mpremote %s failed:\n%s" % (" ".join(args)[:200], p.stdout[-3000:])
    return p.stdout


def board_eval(port, code, timeout=120):
    """Run code on the board; returns the last line it printed."""
    out = mpremote(port, "exec", code, timeout=timeout)
    lines = [ln for ln in out.splitlines() if ln.strip()]
    return lines[-1] if lines else ""


def processes_in(folder):
    """Pids of processes whose current directory is `folder` (a virtual board's interpreter runs there)."""
    folder = os.path.realpath(folder)
    pids = []
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        try:
            if os.path.realpath(os.readlink("/proc/%s/cwd" % pid)) == folder:
                pids.append(int(pid))
        except OSError:
            pass
    return pids


def wait_until(pred, timeout=30, step=0.1):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(step)
    return bool(pred())
