"""The device package in mip parts (kvedge_host.boards.parts, device/kvedge-PART.json): every device file in exactly one
part, a part's modules importing at their top only what its parts hold, the packages as the generator writes
them, and `mpremote mip install` of the core alone and of the model runner (with what it requires) working on the
unix port and on the emulated Cortex-M3: the core builds a cache whose arena is the formula's size and has no
attention; the runner generates the same tokens as the whole package on CPython (integer pass: the same bits)."""
import ast
import json
import os
import shutil
import subprocess
import sys

import pytest

from kvedge_host.boards import m3board, parts
from kvedge_host.boards.deploy import device_sources
from kvedge_host.paths import DEVICE, SHARED_MODELS, TOOLS, venv_tool
from kvedge_host.boards.sim import VirtualBoard, make_board

from _boardkit import mpremote


def _module(remote):
    """kvedge/model/run.py -> kvedge.model.run (a package's __init__.py: the package)."""
    m = remote[:-3].replace("/", ".")
    return m[:-len(".__init__")] if m.endswith(".__init__") else m


def _imports(path, remote):
    """(top-level, function-level) kvedge modules a file imports: `from . import x` and `from .x import y` resolved."""
    tree = ast.parse(open(path).read())
    me = _module(remote).split(".")
    pkg = me if remote.endswith("__init__.py") else me[:-1]
    top, lazy = set(), set()
    body = set()
    for node in tree.body:  # the module's own statements, and those in its top-level try/if blocks
        body.update(id(n) for n in ast.walk(node) if not isinstance(node, (ast.FunctionDef, ast.ClassDef)))
    for node in ast.walk(tree):
        names = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = ".".join(pkg[:len(pkg) - node.level + 1] + ([node.module] if node.module else [])) \
                if node.level else node.module
            names = [base] + ["%s.%s" % (base, a.name) for a in node.names]
        names = [n for n in names if n == "kvedge" or n.startswith("kvedge.")]
        (top if id(node) in body else lazy).update(names)
    return top, lazy


def _owner():
    return {_module("kvedge/%s.py" % m): p for p in parts.PARTS for m in parts.PARTS[p][2]}


def test_every_device_file_is_in_exactly_one_part():
    missing, twice = parts.unowned()
    assert not missing and not twice, (missing, twice)


def test_a_parts_modules_import_only_what_it_and_its_required_parts_hold():
    owner = _owner()
    modules = set(owner)
    for src, remote in device_sources():
        part = owner[_module(remote)]
        have = set(parts.closure(part))
        maybe = have | set(x for p in have for o in parts.OPTIONAL.get(p, ()) for x in parts.closure(o))
        top, lazy = _imports(src, remote)
        for name, allowed in [(n, have) for n in top] + [(n, maybe) for n in lazy]:
            if name.endswith("__init__") or name not in modules:
                continue  # `from kvedge.x import name`: the name is no module
            assert owner[name] in allowed, "%s (part %s) imports %s (part %s)" % (remote, part, name, owner[name])


def test_the_packages_are_as_the_generator_writes_them():
    p = subprocess.run([sys.executable, os.path.join(TOOLS, "gen_package_json.py"), "--check"],
                       stdout=subprocess.PIPE, text=True)
    assert p.returncode == 0, p.stdout
    for name in parts.PARTS:
        doc = json.load(open(parts.package_path(name)))
        want = [f for p in parts.closure(name) for f in ("kvedge/%s.py" % m for m in parts.PARTS[p][2])]
        assert [u[0] for u in doc["urls"]] == want and all(u[0] == u[1] for u in doc["urls"])
        assert all(os.path.isfile(os.path.join(DEVICE, u[1])) for u in doc["urls"])
    core = json.load(open(parts.package_path("core")))
    assert "kvedge/cache.py" in [u[0] for u in core["urls"]]
    assert not [u for u in core["urls"] if "attention" in u[0] or "model/" in u[0] or "kernels" in u[0]]


CORE_RUN = """import sys
for k in list(sys.modules):
    if k.startswith('kvedge'):
        del sys.modules[k]
sys.path.insert(0, %(lib)r)
import kvedge
from kvedge.config import CacheConfig
from kvedge.cache import KVCache
from array import array
c = KVCache(CacheConfig(2, 4, 2, 8, 24, 'i8', window=16, sinks=4, align=0))
for t in range(30):
    c.start_token()
    for layer in range(2):
        c.write(layer, array('f', [0.25 * ((t + i) %% 7 - 3) for i in range(16)]), array('f', [0.5] * 16))
try:
    import kvedge.attention
    att = 'attention installed'
except ImportError:
    att = 'no attention'
print('CORE', kvedge.__file__, len(c.arena), c.stats()['tokens_seen'], att)
"""


def _install(port, part, lib):
    out = mpremote(port, "mip", "install", "--target", lib, parts.package_path(part), timeout=600)
    assert "Done" in out, out[-1500:]


def _check_core(port):
    _install(port, "core", "libcore")
    out = mpremote(port, "exec", CORE_RUN % {"lib": "libcore"}, timeout=300)
    line = [ln for ln in out.splitlines() if ln.startswith("CORE ")]
    assert line, out[-1500:]
    _, path, nbytes, seen, att = line[-1].split(" ", 4)
    # the arena's size by hand: a ring of 16 + 4 sinks = 20 slots; per (layer, K|V, KV head, slot) head_dim int8
    # codes and a 2-byte f16 scale, unaligned
    assert path.startswith("libcore/kvedge") and int(nbytes) == 2 * 2 * 2 * 20 * (8 + 2), line
    assert int(seen) == 30 and att == "no attention", line


RUN = """import sys
for k in list(sys.modules):
    if k.startswith('kvedge'):
        del sys.modules[k]
sys.path.insert(0, %(lib)r)
from kvedge.model.run import main
main(%(model)r, %(tok)r, prompt=%(prompt)r, steps=24, temperature=0.0, kv={'dtype': 'i8', 'max_tokens': 32},
     forward='int', int_attention=True, kernel='plain')
"""


def _model_files(folder):
    """stories260K as int8 weights and its tokenizer in `folder` with a prompt, or where ../shared/models is
    absent the tiny random model (whose greedy text is one piece repeated: the run is all it shows)."""
    sys.path.insert(0, DEVICE)
    from kvedge.model import tiny
    from kvedge.model.checkpoint import convert_to_i8
    stories = os.path.join(SHARED_MODELS, "stories260K.bin")
    if os.path.exists(stories):
        convert_to_i8(stories, os.path.join(folder, "m.i8.bin"))
        shutil.copyfile(os.path.join(SHARED_MODELS, "tok512.bin"), os.path.join(folder, "tok.bin"))
        return {"model": "m.i8.bin", "tok": "tok.bin", "prompt": "Lily"}
    f32 = os.path.join(folder, "tiny.bin")
    shape = tiny.write_checkpoint(f32, seed=2)
    convert_to_i8(f32, os.path.join(folder, "m.i8.bin"))
    tiny.write_tokenizer(os.path.join(folder, "tok.bin"), shape["vocab_size"])
    return {"model": "m.i8.bin", "tok": "tok.bin", "prompt": ""}


def _text(out):
    """The generated bytes (the tiny vocabulary's pieces are any bytes): what the run printed before its stats
    line (#KVEDGE, timings in it)."""
    return b" ".join(out[:out.find(b"#KVEDGE")].split()) if b"#KVEDGE" in out else b""


def _run(cmd, cwd=None):
    p = subprocess.run(cmd, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, timeout=600)
    assert p.returncode == 0 and b"Traceback" not in p.stdout, p.stdout[-1500:]
    return p.stdout


def _check_model(port, fs, files):
    """files: _model_files(fs), written before the board started (the emulated board's flash is the folder as
    it was then)."""
    _install(port, "model", "libmodel")
    out = _run([venv_tool("mpremote"), "connect", port, "resume", "exec", RUN % dict(files, lib="libmodel")])
    # the whole package on CPython, from the repository's device folder
    ref = _run([sys.executable, "-c", RUN % dict(files, lib=DEVICE)], cwd=fs)
    assert len(_text(out)) >= 24 and _text(out) == _text(ref), (out[-800:], ref[-800:])


# mip installs sources: compiling the runner from .py takes more heap than an rp2040 has (a board runs it as
# .mpy: kvedge deploy --mpy); installing is what is tested here, at the emulated board's 2 MiB image
HEAP = 2 * 1024 * 1024


@pytest.fixture(scope="module")
def unix_board(tmp_path_factory):
    vb = VirtualBoard("rp2040", fs=str(tmp_path_factory.mktemp("mipfs")), heap=HEAP)
    vb.files = _model_files(vb.fs)
    vb.start()
    yield vb
    vb.stop()


def test_the_core_alone_installs_and_builds_its_cache_on_the_unix_port(unix_board):
    _check_core(unix_board.port)


def test_the_model_runner_installs_with_what_it_requires_and_generates_on_the_unix_port(unix_board):
    _check_model(unix_board.port, unix_board.fs, unix_board.files)


WHY = m3board.missing("rp2040", HEAP)


@pytest.mark.skipif(WHY is not None, reason="emulated Cortex-M3: %s" % WHY)
def test_the_core_and_the_model_runner_install_on_the_emulated_board(tmp_path):
    fs = tmp_path / "fs"
    fs.mkdir()
    files = _model_files(str(fs))
    vb, why = make_board("rp2040", fs=str(fs), heap=HEAP)
    assert vb.kind == "m3", why
    with vb:
        _check_core(vb.port)
        _check_model(vb.port, str(fs), files)
