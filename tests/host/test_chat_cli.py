"""`kvedge chat` (issue 45: turns on one cache, kvedge.chat): two lines piped on stdin give the replies of a
reference, a fresh model fed the conversation's ids one step at a time from scratch (greedy, the tokenizer that holds
its vocabulary in RAM), on CPython, on the MicroPython unix port and on the emulated Cortex-M3; `--save` after turn 1
then `--resume` with turn 2 in a fresh process give what both turns at once give; a broken, foreign or missing
session is one line naming the file, exit 2, no traceback."""
import os
import subprocess
import sys

import pytest

from kvedge_host.boards import runtimes
from kvedge_host.paths import ROOT

from _boardkit import env

LINES = ["Once upon a time", "the dog ran"]
MAX_NEW = 12
CACHES = {"keep": ["--max-tokens", "64"], "window": ["--kv-dtype", "i8", "--window", "20", "--sinks", "2"]}


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from kvedge.model import tiny
    d = tmp_path_factory.mktemp("chat")
    m, t = str(d / "m.bin"), str(d / "tok.bin")
    tiny.write_checkpoint(m, seed=3, dim=16, hidden_dim=32, n_heads=4, n_kv_heads=2, vocab_size=352, seq_len=128)
    tiny.write_tokenizer(t, 352)
    return d, m, t


def _runtimes():
    out = [pytest.param("cpython")]
    for r in ("unix", "m3"):
        why = runtimes.missing(r)
        out.append(pytest.param(r, marks=pytest.mark.skipif(why is not None, reason=str(why))))
    return out


def chat(files, lines, *args):
    d, m, t = files
    p = subprocess.run([sys.executable, "-m", "kvedge_host.cli", "chat", "--model", m, "--tokenizer", t,
                        "--max-new", str(MAX_NEW)] + [str(a) for a in args], input="".join(ln + "\n" for ln in lines)
                       .encode(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env(), cwd=ROOT, timeout=600)
    p.stderr = p.stderr.decode("utf-8", "replace")
    return p


def reference(files, lines, kv):
    """The replies, each ended by a newline, of a fresh Llama fed every id of the conversation one at a time."""
    from kvedge.model.llama import Llama
    from kvedge.model.sampler import argmax
    from kvedge.model.tokenizer import Tokenizer
    d, m, t = files
    model = Llama(m, kv=kv, forward="float", int_attention=False)
    tok = Tokenizer.load(t, 352)
    out = b""
    kept = None
    for i, line in enumerate(lines):
        ids = tok.encode(line, bos=(i == 0))
        if kept is not None:
            ids = [kept] + ids
        for x in ids:
            lg = model.forward(x)
        prev = ids[-1]
        for n in range(1, MAX_NEW + 1):
            nxt = argmax(lg, 352)
            kept = nxt
            if nxt in (1, 2):  # BOS, EOS: the reply ends; the next turn feeds it first
                break
            out += tok.piece(prev, nxt)
            prev = nxt
            if n == MAX_NEW:
                break
            lg = model.forward(nxt)
        out += b"\n"
    model.close()
    return out, model.cache.stats()


def _text(b, runtime):
    # a MicroPython port's output comes back as text: a random model's pieces that are not UTF-8 are replaced there
    return b if runtime == "cpython" else b.decode("utf-8", "replace")


@pytest.mark.parametrize("runtime", _runtimes())
def test_two_lines_on_stdin_give_the_replies_of_one_stream_from_scratch(files, runtime):
    p = chat(files, LINES, "--runtime", runtime, *CACHES["keep"])
    assert p.returncode == 0, p.stderr[-2000:]
    want, st = reference(files, LINES, {"dtype": "f32", "align": 0, "max_tokens": 64})
    assert _text(p.stdout, runtime) == _text(want, runtime), (p.stdout, want)
    turns = [ln for ln in p.stderr.splitlines() if ln.startswith("[turn")]
    assert len(turns) == 2, p.stderr
    assert ("the cache holds %d of %d positions, 0 evicted" % (st["tokens_seen"], st["tokens_seen"])) in turns[1]


@pytest.mark.parametrize("runtime", [r for r in _runtimes() if r.values[0] != "m3"])
@pytest.mark.parametrize("cache", sorted(CACHES))
def test_saved_after_turn_one_and_resumed_equals_both_turns_at_once(files, runtime, cache, tmp_path):
    flags = ["--runtime", runtime, "--temperature", "0.8", "--seed", "5"] + CACHES[cache]
    both = chat(files, LINES, *flags)
    assert both.returncode == 0, both.stderr[-2000:]
    sess = str(tmp_path / "conv")
    one = chat(files, LINES[:1], "--save", sess, *flags)
    assert one.returncode == 0, one.stderr[-2000:]
    two = chat(files, LINES[1:], "--resume", sess, *flags)
    assert two.returncode == 0, two.stderr[-2000:]
    assert one.stdout + two.stdout == both.stdout
    last = [ln for ln in both.stderr.splitlines() if ln.startswith("[turn 2")][0]
    assert last.replace("turn 2", "turn 1").rsplit(",", 1)[0] == [
        ln for ln in two.stderr.splitlines() if ln.startswith("[turn 1")][0].rsplit(",", 1)[0]
    if cache == "window":
        assert ", 0 evicted" not in last, last  # the window evicted during turn 2


@pytest.mark.parametrize("runtime", [r for r in _runtimes() if r.values[0] != "m3"])
def test_a_broken_resume_file_is_one_line_exit_two(files, runtime, tmp_path):
    sess = str(tmp_path / "conv")
    p = chat(files, LINES[:1], "--save", sess, "--runtime", runtime)
    assert p.returncode == 0, p.stderr[-2000:]
    with open(sess + ".s0", "rb") as f:
        good = f.read()
    flipped = bytearray(good)
    flipped[len(good) // 2] ^= 0x55  # a byte of the saved cache changed: its part's checksum fails
    cases = ((bytes(flipped), "conv.s0"), (b"XXXX" + good[4:], "not a kvedge session"),
             (good[:len(good) // 3], "conv.s0 was cut at"))
    for content, says in cases:
        with open(sess + ".s0", "wb") as f:
            f.write(content)
        p = chat(files, LINES[1:], "--resume", sess, "--runtime", runtime)
        assert p.returncode == 2, (p.returncode, p.stderr)
        assert "Traceback" not in p.stderr and b"Traceback" not in p.stdout, p.stderr
        assert len(p.stderr.strip().splitlines()) == 1 and says in p.stderr, p.stderr
    os.remove(sess + ".s0")
    p = chat(files, LINES[1:], "--resume", sess, "--runtime", runtime)
    assert p.returncode == 2 and "no saved session" in p.stderr and len(p.stderr.strip().splitlines()) == 1, p.stderr


@pytest.mark.parametrize("sim", ["unix", "m3"])
def test_at_a_port_the_turns_run_on_the_board_and_its_session_lives_there(files, tmp_path, sim):
    # a virtual rp2040 (the unix port with the rp2040's heap, or the emulated Cortex-M3): the two turns' replies are
    # the reference's, and --save after turn 1 then --resume with turn 2 (files on the board's filesystem) the same
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
        flags = ["--port", vb.port, "--board", "rp2040"] + extra

        def run(lines, *more):
            p = chat(files, lines, *(flags + list(more)))
            assert p.returncode == 0, p.stderr[-2000:]
            return p.stdout.replace(b"\r\n", b"\n")
        # an f32 cache: the float pass's bits are the reference's (an i8 cache takes the board's integer attention)
        want, _ = reference(files, LINES, {"dtype": "f32", "align": 0, "max_tokens": 64})
        keep = run(LINES, *CACHES["keep"])
        assert _text(keep, "unix") == _text(want, "unix"), (keep, want)
        flags += CACHES["window"]
        both = run(LINES)
        first = run(LINES[:1], "--save", "conv")
        rest = run(LINES[1:], "--resume", "conv")
        assert first + rest == both, (first, rest, both)
        p = chat(files, LINES[1:], "--resume", "nothere", *flags)
        assert p.returncode == 2 and "Traceback" not in p.stderr, p.stderr
        assert p.stderr.strip().splitlines()[-1].endswith(
            "nothere: no saved session (neither nothere.s0 nor nothere.s1 holds one) (on the board at %s)" % vb.port)
    finally:
        vb.stop()


@pytest.mark.parametrize("runtime", [r for r in _runtimes() if r.values[0] != "m3"])
def test_a_line_the_cache_has_no_room_for_is_one_line_exit_two_after_the_turns_before(files, runtime):
    # 10 slots, no window: turn 1 fits, turn 2's 11 ids do not (kvedge.chat refuses it before feeding any)
    long_line = "and then the dog ran home to the big red house"
    p = chat(files, ["the", long_line], "--runtime", runtime, "--max-tokens", "10")
    assert p.returncode == 2, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr and b"Traceback" not in p.stdout, (p.stderr, p.stdout)
    err = [ln for ln in p.stderr.strip().splitlines() if not ln.startswith("[turn")]
    assert len(err) == 1 and "the cache has room for" in err[0] and "no window" in err[0], p.stderr
    assert len([ln for ln in p.stderr.splitlines() if ln.startswith("[turn 1")]) == 1, p.stderr
