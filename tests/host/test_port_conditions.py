"""`kvedge generate --port` and `kvedge deploy --port` in bad conditions, on the emulated Cortex-M3 (its serial pty
standing in for a USB port) and on the unix-port virtual board: a board busy with a program, a board that resets
or loses power mid-generation, a profile that does not describe the board, a full filesystem."""
import hashlib
import os
import select
import subprocess
import tempfile
import time

import pytest

from kvedge_host.boards.sim import VirtualBoard

from _boardkit import kvedge

LONG = ["--steps", "100000", "--window", "16", "--kv-dtype", "i8"]  # runs until stopped
SHORT = ["--steps", "8", "--kv-dtype", "i8"]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge_host.boards.tinyckpt import write
    d = tmp_path_factory.mktemp("model")
    model, tok = write(str(d))
    convert_to_i8(model, str(d / "tiny.i8.bin"))
    return str(d / "tiny.i8.bin"), tok


def _preloaded(fs, files, march):
    from kvedge_host.boards.deploy import deployment, preload
    with tempfile.TemporaryDirectory() as build:
        preload(fs, deployment("rp2040", build, True, extra=files, march=march))


@pytest.fixture(scope="module", params=["m3", "unix"])
def board(request, files, tmp_path_factory):
    """(board, extra generate flags): the emulated Cortex-M3 or the unix port, rp2040 heap, files preloaded."""
    fs = str(tmp_path_factory.mktemp("flash"))
    if request.param == "m3":
        from kvedge_host.boards import m3board
        why = m3board.missing("rp2040")
        if why:
            pytest.skip(why)
        from kvedge_host.boards.m3sim import M3Sim
        _preloaded(fs, files, "armv6m")
        vb, extra = M3Sim("rp2040", fs=fs), []
    else:
        _preloaded(fs, files, "x64")
        vb, extra = VirtualBoard("rp2040", fs=fs), ["--march", "x64"]
    vb.start()
    yield vb, extra
    vb.stop()


def _generate(vb, extra, files, more, **kw):
    return kvedge("generate", "--port", vb.port, "--board", "rp2040", "--model", files[0], "--tokenizer", files[1],
                  *(more + extra), **kw)


def _ok(p):
    assert p.returncode == 0, p.stdout[-1500:] + p.stderr[-2500:]
    assert "0 lost, 0 duplicated" in p.stderr and "[8 tokens in" in p.stderr, p.stderr[-2000:]


def test_a_busy_board_is_interrupted(board, files):
    vb, extra = board
    p = _generate(vb, extra, files, LONG + ["--detach"])
    assert p.returncode == 0 and "started on" in p.stderr, p.stderr
    time.sleep(2)  # it is generating now
    _ok(_generate(vb, extra, files, SHORT))


def _bg(vb, extra, files):
    from _boardkit import kvedge_bg
    return kvedge_bg("generate", "--port", vb.port, "--board", "rp2040", "--model", files[0], "--tokenizer",
                     files[1], *(LONG + extra))


def _wait_for_stats(proc, timeout=180):
    """Read the generation's stderr until its first KVSTATS line; returns what was read."""
    seen = ""
    end = time.monotonic() + timeout
    fd = proc.stderr.fileno()
    while "KVSTATS" not in seen and time.monotonic() < end and proc.poll() is None:
        r, _, _ = select.select([fd], [], [], 0.5)
        if r:
            seen += os.read(fd, 4096).decode(errors="replace")
    assert "KVSTATS" in seen, seen
    return seen


def test_a_reset_mid_generation_stops_the_run_cleanly_and_the_next_run_works(board, files):
    vb, extra = board
    proc = _bg(vb, extra, files)
    try:
        _wait_for_stats(proc)
        vb.reset()
        out, err = proc.communicate(timeout=180)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1, err[-2000:]
    last = err.strip().splitlines()[-1]
    assert last.startswith("kvedge generate: error: the board reset during the generation (") and \
        last.endswith("; the run stopped"), err[-2000:]
    assert "Traceback" not in err
    _ok(_generate(vb, extra, files, SHORT))


def test_a_board_that_loses_power_and_starts_again_from_its_flash(files, tmp_path):
    # the emulated board killed mid-generation (its port vanishes), then started again from the same flash image
    from kvedge_host.boards import m3board
    why = m3board.missing("rp2040")
    if why:
        pytest.skip(why)
    from kvedge_host.boards.m3sim import M3Sim
    fs = str(tmp_path / "flash")
    _preloaded(fs, files, "armv6m")
    vb = M3Sim("rp2040", fs=fs)
    vb.start()
    proc = _bg(vb, [], files)
    try:
        _wait_for_stats(proc)
        vb.stop()
        out, err = proc.communicate(timeout=180)
    finally:
        vb.stop()
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 1 and "the board reset during the generation (the port vanished)" in err, err[-2000:]
    with M3Sim("rp2040", fs=fs) as vb2:
        p = _generate(vb2, [], files, SHORT)
        _ok(p)
        assert ": 0 sent, " in p.stderr, p.stderr  # the package and files were still on its flash


def _snapshot(folder):
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            with open(os.path.join(root, n), "rb") as f:
                out[os.path.relpath(os.path.join(root, n), folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


@pytest.mark.parametrize("flags, says", [
    (["--board", "esp32"], "loads .mpy machine code for x64, not xtensawin"),
    (["--board", "rp2040-circuitpython", "--march", "x64"], "a circuitpython profile"),
    (["--board", "rp2350", "--march", "x64"], "bytes of heap, --board rp2350 plans for 460,800"),
])
def test_a_profile_that_is_not_the_board_is_refused_before_deploying(files, tmp_path, flags, says):
    fs = tmp_path / "fs"
    with VirtualBoard("rp2040", fs=str(fs)) as vb:
        before = _snapshot(fs)
        p = kvedge("generate", "--port", vb.port, "--model", files[0], "--tokenizer", files[1], *(flags + SHORT))
        assert _snapshot(fs) == before
    assert p.returncode == 2 and says in p.stderr, p.stderr
    assert len(p.stderr.strip().splitlines()) == 1 and "Traceback" not in p.stderr


def test_a_profile_the_emulated_chip_cannot_run_is_refused(files, tmp_path):
    from kvedge_host.boards import m3board
    why = m3board.missing("rp2040")
    if why:
        pytest.skip(why)
    from kvedge_host.boards.m3sim import M3Sim
    with M3Sim("rp2040", fs=str(tmp_path / "flash")) as vb:
        p = kvedge("generate", "--port", vb.port, "--board", "rp2350", "--model", files[0], "--tokenizer",
                   files[1], *SHORT)
        from kvedge_host.boards.deploy import inventory
        held, _ = inventory(vb.port, ["kvedge"])
    arch = {"m0": "armv6m", "m3": "armv7em"}[vb.layout.key]  # what the machine's firmware reports
    assert p.returncode == 2 and "loads .mpy machine code for %s, not armv7emsp" % arch in p.stderr, p.stderr
    assert held == {}


@pytest.fixture
def small_fs(tmp_path):
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(mnt)], capture_output=True)
    if p.returncode:
        pytest.skip("cannot mount a small tmpfs here: %s" % p.stderr.decode().strip())
    yield mnt
    subprocess.run(["umount", str(mnt)])


def test_a_full_filesystem_is_refused_with_the_bytes_missing(files, tmp_path, small_fs):
    with VirtualBoard("rp2040", fs=str(small_fs)) as vb:
        p = kvedge("deploy", "--port", vb.port, "--board", "rp2040", "--extra", files[0], "-q")
        assert p.returncode == 0, p.stderr
        before = _snapshot(small_fs)
        st = os.statvfs(small_fs)
        big = tmp_path / "big.bin"
        big.write_bytes(os.urandom(st.f_bavail * st.f_frsize + 10000))
        p = kvedge("deploy", "--port", vb.port, "--board", "rp2040", "--extra", str(big))
        assert _snapshot(small_fs) == before
    assert p.returncode == 2 and "bytes missing (nothing was written" in p.stderr, p.stderr
    free = st.f_bavail * st.f_frsize
    need = (big.stat().st_size + st.f_frsize - 1) // st.f_frsize * st.f_frsize
    assert "has %d bytes free, the deploy needs %d: %d bytes missing" % (free, need, need - free) in p.stderr
