"""`kvedge generate --save FILE` and `--resume FILE` (issue 45 item 3, kvedge.session) on the host runtimes: 60
positions at once give the text of 30 with --save, then, in a fresh process, 30 more with --resume (token for
token: the same pieces, and the cache's counters carried on), for a window + sinks i8 cache, an i4 KIVI cache and H2O,
sampled with a temperature, on CPython and on the MicroPython unix port; and a tiered plan (`kvedge plan --kind
tiered`: blocks go to flash before and after the save, the cold store reopened as it is, in the user's folder) on
both; and at --port on the unix-port virtual board and the emulated Cortex-M3 (a window, an i4 KIVI cache and a
tiered plan; each run a fresh interpreter after a soft reset, the session on the board's filesystem). A damaged,
foreign, mismatched or missing
session is one line naming the file and the problem, exit 2, no traceback."""
import os
import re
import subprocess
import sys

import pytest

from kvedge_host.boards import runtimes
from kvedge_host.paths import ROOT

from _boardkit import env

CACHES = {"window": ["--kv-dtype", "i8", "--window", "24", "--sinks", "4"],
          "kivi": ["--kv-dtype", "i4", "--max-tokens", "64"], "h2o": ["--kv-dtype", "i8", "--h2o", "24"]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from kvedge.model import tiny
    d = tmp_path_factory.mktemp("session")
    m, t = str(d / "m.bin"), str(d / "tok.bin")
    tiny.write_checkpoint(m, seed=3, dim=16, hidden_dim=32, n_heads=4, n_kv_heads=2, vocab_size=352, seq_len=128)
    tiny.write_tokenizer(t, 352)
    return d, m, t


def _runtimes():
    out = [pytest.param("cpython")]
    why = runtimes.missing("unix")
    out.append(pytest.param("unix", marks=pytest.mark.skipif(why is not None, reason=str(why))))
    return out


def kvedge(*args, cwd=ROOT):
    """The CLI in a fresh process; stdout as bytes (a random model's pieces are not all UTF-8), stderr as text."""
    p = subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + [str(a) for a in args], stdout=subprocess.PIPE,
                       stderr=subprocess.PIPE, env=env(), cwd=cwd, timeout=300)
    p.stderr = p.stderr.decode("utf-8", "replace")
    return p


def _gen(files, runtime, cache, *extra):
    d, m, t = files
    p = kvedge("generate", "--model", m, "--tokenizer", t, "--temperature", "0.8", "--seed", "3", "--runtime",
               runtime, *(CACHES[cache] + list(extra)))
    assert p.returncode == 0, p.stderr[-2000:]
    text = p.stdout
    trail = b"\n\n" if runtime != "cpython" else b"\n"  # the summary's newline (and the port's end of text)
    assert text.endswith(trail), repr(text[-20:])
    summary = [ln for ln in p.stderr.splitlines() if ln.startswith("[")][-1]
    return text[:-len(trail)], summary


def _evictions(summary):
    return int(re.search(r"evictions (\d+)", summary).group(1))


@pytest.mark.parametrize("cache", sorted(CACHES))
@pytest.mark.parametrize("runtime", _runtimes())
def test_sixty_at_once_equal_thirty_saved_and_thirty_resumed(files, runtime, cache):
    sess = str(files[0] / ("s_%s_%s" % (runtime, cache)))
    whole, s60 = _gen(files, runtime, cache, "--steps", "60")
    first, s30 = _gen(files, runtime, cache, "--steps", "30", "--save", sess)
    assert os.path.exists(sess + ".s0")
    rest, r30 = _gen(files, runtime, cache, "--steps", "30", "--resume", sess)
    assert len(whole) > 30 and first + rest == whole, (first, rest, whole)
    assert "[30 tokens" in s30 and "[30 tokens" in r30, (s30, r30)
    assert _evictions(r30) == _evictions(s60), (r30, s60)  # the counters carried on
    # the resumed run saved again and resumed once more: the save alternates files, the newer one wins
    more, _ = _gen(files, runtime, cache, "--steps", "10", "--save", sess)
    assert os.path.exists(sess + ".s1")


def _tiered_plan(files, forward="auto"):
    """A tiered plan for the rp2040: on the float pass by default (the planner's pick for this model), on the integer
    pass with forward="int" (a token of the emulated board's in ~0.7 M instructions, not ~17 M)."""
    d, m, t = files
    plan = str(d / ("tiered_%s.json" % forward))
    if not os.path.exists(plan):
        p = kvedge("plan", "--model", m, "--tokenizer", t, "--board", "rp2040", "--kv-dtype", "i8", "--align", "0",
                   "--kind", "tiered", "--context", "128", "--forward", forward, "--out", plan)
        assert p.returncode == 0, p.stderr[-2000:]
    return plan


@pytest.mark.parametrize("runtime", _runtimes())
def test_a_tiered_plan_resumes_with_its_cold_store(files, runtime):
    d, m, t = files
    plan = _tiered_plan(files)
    work = d / ("tiered_run_" + runtime)  # the cold store's files (kv_cold.*) go to the user's folder
    work.mkdir()
    sess = str(d / ("s_tiered_" + runtime))
    base = ["generate", "--model", m, "--tokenizer", t, "--plan", plan, "--temperature", "0.8", "--seed", "3",
            "--runtime", runtime]
    trail = 1 if runtime == "cpython" else 2  # the summary's newline (and the port's end of text)
    runs = []
    for more in (["--steps", "240"], ["--steps", "120", "--save", sess], ["--steps", "120", "--resume", sess]):
        p = kvedge(*(base + more), cwd=str(work))
        assert p.returncode == 0, p.stderr[-2000:]
        runs.append((p.stdout[:-trail], [ln for ln in p.stderr.splitlines() if ln.startswith("[")][-1]))
    assert "tiered" in runs[0][1] and "cold tokens" in runs[0][1], runs[0][1]
    assert runs[1][0] + runs[2][0] == runs[0][0]
    assert _evictions(runs[2][1]) == _evictions(runs[0][1]) > 0, runs  # blocks dropped at the cap, counted on
    assert os.path.exists(str(work / "kv_cold.h0"))


def _refused(files, *args):
    d, m, t = files
    p = kvedge("generate", "--model", m, "--tokenizer", t, "--steps", "5", *args)
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and b"Traceback" not in p.stdout, (p.stderr, p.stdout)
    lines = p.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    return lines[0]


@pytest.mark.parametrize("runtime", _runtimes())
def test_bad_sessions_are_one_line_exit_two(files, runtime):
    d = files[0]
    sess = str(d / ("bad_%s" % runtime))
    _gen(files, runtime, "window", "--steps", "8", "--save", sess)
    good = open(sess + ".s0", "rb").read()
    rt = ["--runtime", runtime] + CACHES["window"]
    b = bytearray(good)
    b[len(b) // 2] ^= 4
    open(sess + ".s0", "wb").write(b)
    line = _refused(files, "--resume", sess, *rt)
    assert sess + ".s0" in line and "checksum" in line, line
    open(sess + ".s0", "wb").write(b"not a session" * 20)
    line = _refused(files, "--resume", sess, *rt)
    assert "not a kvedge session" in line, line
    open(sess + ".s0", "wb").write(good)
    line = _refused(files, "--resume", sess, "--runtime", runtime, "--kv-dtype", "i8", "--window", "20", "--sinks",
                    "4")
    assert "another layout" in line and "slots 28 in the file, 24 here" in line, line
    line = _refused(files, "--resume", str(d / "nothere"), *rt)
    assert "no saved session" in line, line
    line = _refused(files, "--resume", sess, "--prompt", "hi", *rt)
    assert "--prompt" in line, line
    open(sess + ".s0", "wb").write(good[:len(good) // 2])  # a save a power cut stopped, and none before it
    line = _refused(files, "--resume", sess, *rt)
    assert "no complete save" in line, line


# the unix port's other caches run in the tests above; the emulated board runs each kind: a window, an i4 KIVI cache
# and a tiered plan (on the integer pass, int8 weights: blocks go to the board's flash before and after the save)
@pytest.mark.parametrize("sim,cache", [("unix", "window"), ("m3", "window"), ("m3", "kivi"), ("m3", "tiered")])
def test_at_a_port_the_session_lives_on_the_boards_filesystem(files, tmp_path, sim, cache):
    import tempfile
    from kvedge_host.boards.deploy import deployment, preload
    if sim == "m3":
        from kvedge_host.boards import m3board
        why = m3board.missing("rp2040")
    else:
        why = runtimes.missing("unix")
    if why:
        pytest.skip(why)
    d, m, t = files
    if cache == "tiered":
        m8 = str(tmp_path / "m8.bin")
        p = kvedge("convert", m, "--weights-dtype", "i8", "-o", m8)
        assert p.returncode == 0, p.stderr[-2000:]
        m = m8
    fs = str(tmp_path / "flash")
    os.mkdir(fs)
    march = "armv6m" if sim == "m3" else "x64"
    with tempfile.TemporaryDirectory() as build:
        preload(fs, deployment("rp2040", build, True, extra=[m, t], march=march))
    if sim == "m3":
        from kvedge_host.boards.m3sim import M3Sim
        vb, extra = M3Sim("rp2040", fs=fs), []
    else:
        from kvedge_host.boards.sim import VirtualBoard
        vb, extra = VirtualBoard("rp2040", fs=fs), ["--march", "x64"]
    vb.start()
    try:
        how = ["--plan", _tiered_plan((d, m, t), "int")] if cache == "tiered" else CACHES[cache]

        def gen(*more):
            p = kvedge("generate", "--port", vb.port, "--board", "rp2040", "--model", m, "--tokenizer", t,
                       "--temperature", "0.8", "--seed", "3", *(how + extra + list(more)))
            assert p.returncode == 0, p.stderr[-2000:]
            out = p.stdout.replace(b"\r\n", b"\n")  # the emulated board's serial ends its lines with CR LF
            assert out.endswith(b"\n\n"), out[-20:]
            return out[:-2]
        n = 120 if cache == "tiered" else 30  # a tiered run sends blocks to flash before and after the save
        whole = gen("--steps", str(2 * n))
        first = gen("--steps", str(n), "--save", "chat")
        rest = gen("--steps", str(n), "--resume", "chat")
        assert len(whole) > n and first + rest == whole, (first, rest, whole)
        if cache != "window":
            return
        p = kvedge("generate", "--port", vb.port, "--board", "rp2040", "--model", m, "--tokenizer", t, "--steps", "5",
                   "--resume", "nothere", *(CACHES["window"] + extra))
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.strip().splitlines()[-1].endswith(
            "nothere: no saved session (neither nothere.s0 nor nothere.s1 holds one) (on the board at %s)" % vb.port)
    finally:
        vb.stop()
