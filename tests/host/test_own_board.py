"""The README's "On your own board" commands, each run against a stand-in for the board: the emulated board that
stands for the profile (`kvedge sim`'s board with the profile's heap: the Pico's Cortex-M0, the Pico 2's Cortex-M7,
the ESP32-S3's Xtensa lx106, or the Cortex-M3 where that cannot run; its serial pty stands in for the USB port) for the MicroPython boards, the real CircuitPython (its unix build; a folder as its CIRCUITPY drive) for the CircuitPython board.

What the stand-ins change in the commands: the port path; the small model of `kvedge demo --tiny` instead of
stories260K; fewer steps; for an ESP32-S3, whose xtensawin machine code its stand-in cannot run (the lx106 loads
xtensa, the Cortex-M3 armv7m), the board check must first refuse the profile's -march, then `--march` with the
stand-in's is added. Package, weights and tokenizer are
put on the emulated board's flash image before it starts (the deploy then checks them on the board instead of
sending them over its slow serial link)."""
import csv
import os
import re
import shutil
import subprocess
import sys
import tempfile

import pytest

from kvedge_host.paths import ROOT

from _boardkit import env

GUIDE = os.path.join(ROOT, "README.md")
PORTS = ("/dev/ttyACM0", "/dev/ttyUSB0")
HEADS = {"Raspberry Pi Pico (RP2040, MicroPython):": "rp2040", "Raspberry Pi Pico 2 (RP2350, MicroPython):": "rp2350",
         "ESP32-S3 (no PSRAM, MicroPython):": "esp32s3",
         "A CircuitPython board (a Pico under CircuitPython 9 or 10, its CIRCUITPY drive mounted):": "cp"}


def guide_commands():
    """{board: [command line, ...]} from the guide's section, in order."""
    text = open(GUIDE).read()
    sec = text[text.index("## On your own board"):]
    end = sec.find("\n## ", 5)
    sec = sec if end < 0 else sec[:end]
    out = {}
    for head, key in HEADS.items():
        i = sec.index(head)
        block = sec[sec.index("```sh\n", i) + 6:sec.index("```", sec.index("```sh\n", i) + 6)]
        out[key] = [ln.strip() for ln in block.splitlines() if ln.strip().startswith("kvedge ")]
    return out


def _argv(line, port=None, subs=()):
    import shlex
    args = shlex.split(line.replace("$USER", "user"))[1:]
    out = []
    for a in args:
        if a in PORTS:
            a = port
        for old, new in subs:
            a = a.replace(old, new)
        out.append(a)
    return out


def _kvedge(args, cwd, timeout=900):
    return subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + args, stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True, env=env(), cwd=cwd, timeout=timeout)


def _tiny_files(folder):
    """What `kvedge demo --tiny` writes in its workdir: model.i8.bin and tok.bin (deterministic)."""
    from kvedge.model.checkpoint import convert_to_i8
    from kvedge_host.boards.tinyckpt import write
    model, tok = write(os.path.join(folder, "tiny"))
    convert_to_i8(model, os.path.join(folder, "model.i8.bin"))
    shutil.copyfile(tok, os.path.join(folder, "tok.bin"))
    return os.path.join(folder, "model.i8.bin"), os.path.join(folder, "tok.bin")


@pytest.mark.parametrize("board", ["rp2040", "rp2350", "esp32s3"])
def test_micropython_board_commands_on_the_emulated_board(board, tmp_path):
    from kvedge_host.boards import m3board
    layout = m3board.layout_for(board)
    why = m3board.missing(board, layout=layout)
    if why:
        pytest.skip(why)
    from kvedge_host import profiles
    from kvedge_host.boards.deploy import deployment, preload
    from kvedge_host.boards.m3sim import M3Sim
    cmds = guide_commands()[board]
    assert [c.split()[1] for c in cmds] == ["demo", "generate"], cmds
    march = m3board.march_for(board, layout)
    fs = str(tmp_path / "flash")
    files = _tiny_files(tempfile.mkdtemp(dir=tmp_path))
    with tempfile.TemporaryDirectory() as build:
        preload(fs, deployment(board, build, True, extra=files, march=march))
    with M3Sim(board, fs=fs) as vb:
        demo = _argv(cmds[0], vb.port) + ["--tiny", "--steps", "12", "--plain"]
        if march != profiles.load(board)["mpy_march"]:
            p = _kvedge(demo, str(tmp_path))
            assert p.returncode == 2 and "not %s" % profiles.load(board)["mpy_march"] in p.stderr, \
                p.stdout + p.stderr
            assert p.stderr.count("\n") == 1 and "is --board right for this chip" in p.stderr
            demo += ["--march", march]
        p = _kvedge(demo, str(tmp_path))
        assert p.returncode == 0, p.stdout[-3000:] + p.stderr[-2000:]
        assert "--board %s fits it" % board in p.stdout and "demo summary" in p.stdout, p.stdout[-3000:]
        work = tmp_path / demo[demo.index("--workdir") + 1]
        assert (work / "plan.json").exists() and (work / "model.i8.bin").exists()
        gen = _argv(cmds[1], vb.port, [("--steps", "--steps")])
        gen[gen.index("--steps") + 1] = "12"
        if march != profiles.load(board)["mpy_march"]:
            gen += ["--march", march]
        p = _kvedge(gen, str(tmp_path))
        assert p.returncode == 0, p.stdout[-2000:] + p.stderr[-3000:]
        m = re.search(r"\[(\d+) tokens in .* weights i8 \((.*?)\), kernels (\w+), cache (\w+)", p.stderr)
        import json
        plan = json.load(open(work / "plan.json"))
        assert m and int(m.group(1)) <= 12 and m.group(4) == plan["cache"]["dtype"], p.stderr[-2000:]
        assert "0 lost, 0 duplicated" in p.stderr and "KVSTATS" in p.stderr


def test_circuitpython_board_commands_on_real_circuitpython(tmp_path):
    from kvedge_host.boards.runtimes import circuitpython_bin, circuitpython_path
    if not circuitpython_bin():
        pytest.skip("no CircuitPython binary at %s" % circuitpython_path())
    from kvedge_host.boards.sim import VirtualBoard
    from kvedge_host.boards.tinyckpt import write
    cmds = guide_commands()["cp"]
    assert [c.split()[1] for c in cmds] == ["convert", "plan", "deploy", "monitor"], cmds
    model, tok = write(str(tmp_path / "m"))
    drive = tmp_path / "CIRCUITPY"
    subs = [("~/.cache/kvedge/models/stories260K.bin", model), ("~/.cache/kvedge/models/tok512.bin", tok),
            ("/media/user/CIRCUITPY", str(drive))]
    vb = VirtualBoard("rp2040-circuitpython", fs=str(drive))
    vb.start()  # the board boots: boot_out.txt appears on its drive, there is no code.py yet
    try:
        for line in cmds[:3]:
            p = _kvedge(_argv(line, vb.port, subs), str(tmp_path))
            assert p.returncode == 0, line + "\n" + p.stdout[-2000:] + p.stderr[-2000:]
        assert not (drive / "lib" / "kvedge" / "kernels" / "viper.py").exists()
        vb.reset()  # CircuitPython restarts code.py when its drive changes
        stats = str(tmp_path / "stats.csv")
        mon = _argv(cmds[3], vb.port, subs) + ["--csv", stats, "--duration", "600"]
        p = _kvedge(mon, str(tmp_path))
        assert p.returncode == 0, p.stderr
    finally:
        vb.stop()
    rows = list(csv.DictReader(open(stats)))
    assert [int(r["seq"]) for r in rows] == list(range(1, len(rows) + 1)), p.stdout
    assert rows[0]["event"] == "start" and rows[-1]["event"] == "final"
    assert {r["session"] for r in rows} == {"1"} and int(rows[-1]["tokens_seen"]) == 64
    assert "0 lost, 0 duplicated, 0 bad lines" in p.stdout
    import json
    assert int(rows[-1]["total_bytes"]) == json.load(open(tmp_path / "cp.json"))["kv_bytes"]
