"""The CLI fuzzer's harness: run `kvedge` in-process (cli.main with captured output, a per-case time limit and
a memory bound) or as a real subprocess, and judge the outcome of each case against what it should be.

A case expects either an error (exit 2, exactly one stderr line `kvedge CMD: error: ...` naming the file or
flag and, where given, the field) or a success (exit 0 and a check of stdout against an independent
computation), or, for random bit flips, either of the two."""
import io
import os
import resource
import signal
import subprocess
import sys
import time

from kvedge_host import cli

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
TIME_LIMIT = 20.0  # seconds per case: generous for a loaded 2-core CI machine; a hang hits it
MEM_LIMIT = 256 << 20  # growth of the process's peak RSS one case may cause (F4 once took 815 MB)

ERROR, OK, EITHER = "error", "ok", "either"


class Case:
    def __init__(self, group, argv, expect, mentions=(), check=None, ok_codes=(0,), heavy=False):
        self.group = group          # what is fuzzed, e.g. "hf-config", "llama2c-header"
        self.argv = [str(a) for a in argv]
        self.expect = expect
        self.mentions = [str(m) for m in mentions]  # all must appear in the error line
        self.check = check          # check(stdout) -> problem or None, for a success
        self.ok_codes = ok_codes
        self.heavy = heavy          # a success that runs a model: few of these

    @property
    def cmd(self):
        return self.argv[0]

    def __repr__(self):
        return "%s: kvedge %s" % (self.group, " ".join(a if len(a) < 80 else a[:77] + "..." for a in self.argv))


class Result:
    def __init__(self, rc, out, err, seconds, mem_growth, exc=None):
        self.rc, self.out, self.err, self.seconds, self.mem_growth, self.exc = rc, out, err, seconds, mem_growth, exc


class CaseTimeout(BaseException):
    """Raised in the main thread by SIGALRM: not an Exception, so no handler in the code under test eats it."""


def _alarm(signum, frame):
    raise CaseTimeout()


def _peak_rss():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024  # Linux reports KB


_PARSER = []


def parser():
    """One argparse parser for every in-process case (cli.main builds a fresh one per call otherwise)."""
    if not _PARSER:
        _PARSER.append(cli.build_parser())
    return _PARSER[0]


def run_inprocess(argv, limit=TIME_LIMIT):
    """cli.main(argv) with stdout/stderr captured (stdout has a .buffer, as generate writes bytes there)."""
    out_b, err_b = io.BytesIO(), io.BytesIO()
    out = io.TextIOWrapper(out_b, "utf-8", errors="backslashreplace", write_through=True)
    err = io.TextIOWrapper(err_b, "utf-8", errors="backslashreplace", write_through=True)
    saved = sys.stdout, sys.stderr
    rss0 = _peak_rss()
    prev = signal.signal(signal.SIGALRM, _alarm)
    signal.setitimer(signal.ITIMER_REAL, limit)
    t0 = time.perf_counter()
    rc, exc = None, None
    sys.stdout, sys.stderr = out, err
    try:
        rc = cli.main(list(argv), parser())
    except SystemExit as e:
        rc = e.code if isinstance(e.code, int) else (0 if e.code is None else 2)
    except KeyboardInterrupt:
        raise
    except BaseException as e:  # a traceback the user would see, or the time limit
        exc = e
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, prev)
        sys.stdout, sys.stderr = saved
    seconds = time.perf_counter() - t0
    out.flush()
    err.flush()
    return Result(rc, out_b.getvalue().decode("utf-8", "replace"), err_b.getvalue().decode("utf-8", "replace"),
                  seconds, _peak_rss() - rss0, exc)


def _limits():
    # a subprocess case may not take more than 4 GB of address space (a memory bomb ends, it does not swap)
    resource.setrlimit(resource.RLIMIT_AS, (4 << 30, 4 << 30))


def run_subprocess(argv, limit=60.0):
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "host"), os.path.join(ROOT, "device")]
                                        + [p for p in [env.get("PYTHONPATH")] if p])
    env["OPENBLAS_NUM_THREADS"] = "1"
    t0 = time.perf_counter()
    try:
        p = subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + list(argv), capture_output=True,
                           timeout=limit, env=env, preexec_fn=_limits, cwd=HERE)
    except subprocess.TimeoutExpired:
        return Result(None, "", "", limit, 0, CaseTimeout())
    return Result(p.returncode, p.stdout.decode("utf-8", "replace"), p.stderr.decode("utf-8", "replace"),
                  time.perf_counter() - t0, 0)


def judge(case, res):
    """None when the outcome is right, else what is wrong (one line)."""
    if isinstance(res.exc, CaseTimeout):
        return "did not finish within %gs" % TIME_LIMIT
    if res.exc is not None:
        return "raised %s: %s" % (type(res.exc).__name__, str(res.exc).splitlines()[:1])
    if res.mem_growth > MEM_LIMIT:
        return "peak memory grew by %d MB" % (res.mem_growth >> 20)
    if "Traceback (most recent call last)" in res.err:
        return "printed a traceback: " + res.err.strip().splitlines()[-1]
    is_err = res.rc == 2
    if case.expect == ERROR and not is_err:
        return "exit %s, expected 2 (stderr %r, stdout %r)" % (res.rc, res.err[-200:], res.out[:200])
    if case.expect == OK and res.rc not in case.ok_codes:
        return "exit %s, expected %s: %s" % (res.rc, case.ok_codes, res.err.strip()[-300:])
    if is_err and case.expect in (ERROR, EITHER):
        lines = [ln for ln in res.err.splitlines() if ln.strip()]
        if len(lines) != 1:
            return "%d stderr lines, expected 1: %r" % (len(lines), res.err[-300:])
        line = lines[0]
        if not line.startswith("kvedge %s: error: " % case.cmd):
            return "error line does not start with 'kvedge %s: error: ': %r" % (case.cmd, line)
        for m in case.mentions:
            if m not in line:
                return "error line does not name %r: %r" % (m, line)
        return None
    if res.rc not in case.ok_codes:
        return "exit %s: %s" % (res.rc, res.err.strip()[-300:])
    if case.check is not None:
        try:
            return case.check(res.out)
        except Exception as e:  # a malformed success is a failure of the case, reported, not a crash of the fuzzer
            return "success output did not check: %s: %s" % (type(e).__name__, e)
    return None
