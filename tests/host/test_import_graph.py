"""No import circle among the device modules nor among the host modules (issue 42): a circle works in Python, but
it blurs a boundary (neither end can be read, tested or shipped without the other). The graph is read from the
source with ast, over every import: the module-level ones and the lazy ones inside functions alike, since a lazy
import is still an arrow.

An arrow goes from a module to the module it names: `from kvedge.model import header` and `from . import header`
point at kvedge.model.header; `from kvedge_host.readers import UserError` (a name, not a submodule) points at the
package, kvedge_host.readers. Importing a submodule also runs its package's __init__, but that arrow is not counted
(every module would otherwise form a circle with an __init__ that imports it).

Run as a script (python tests/host/test_import_graph.py) it prints every circle it finds."""
import ast
import os
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
PACKAGES = {"kvedge": os.path.join(ROOT, "device"), "kvedge_host": os.path.join(ROOT, "host")}

# No allowance: every circle is a failure (the last one, kvedge.cache <-> kvedge.q8writes, went with the decode
# interface: q8writes and q8rows import nothing of the cache).
ALLOWED = set()


def modules(top):
    """{dotted name: path} of every module of the package `top`."""
    found = {}
    base = PACKAGES[top]
    for root, dirs, names in os.walk(os.path.join(base, top)):
        dirs[:] = sorted(d for d in dirs if d != "__pycache__")
        for n in sorted(names):
            if not n.endswith(".py"):
                continue
            rel = os.path.relpath(os.path.join(root, n), base)[:-3].split(os.sep)
            if rel[-1] == "__init__":
                rel = rel[:-1]
            found[".".join(rel)] = os.path.join(root, n)
    return found


def _resolve(name, level, here, is_package):
    """The absolute module name of `from <level dots><name> import ...` written in module `here`."""
    if not level:
        return name
    parts = here.split(".")
    if not is_package:
        parts = parts[:-1]
    if level > 1:
        parts = parts[:len(parts) - (level - 1)]
    return ".".join(parts + ([name] if name else []))


def arrows(name, source, known, is_package=False):
    """The modules of `known` that module `name` (its source text) imports, anywhere: at the top, inside a
    function, a method, a try or an if."""
    tree = ast.parse(source)
    out = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                target = alias.name
                while target and target not in known:  # import a.b.c: the deepest module of ours it names
                    target = target.rpartition(".")[0]
                if target:
                    out.add(target)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node.module or "", node.level, name, is_package)
            for alias in node.names:
                sub = base + "." + alias.name
                if sub in known:
                    out.add(sub)
                elif base in known:
                    out.add(base)
    out.discard(name)
    return out


def graph(top):
    known = modules(top)
    out = {}
    for name, path in known.items():
        with open(path, encoding="utf-8") as f:
            out[name] = arrows(name, f.read(), known, os.path.basename(path) == "__init__.py")
    return out


def circles(g):
    """The strongly connected components of more than one module (Tarjan), each sorted; sorted."""
    index, low, stack, on, out = {}, {}, [], set(), []
    counter = [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in sorted(g[v]):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.append(sorted(comp))

    for v in sorted(g):
        if v not in index:
            visit(v)
    return sorted(out)


def _offending(top):
    return [c for c in circles(graph(top)) if frozenset(c) not in ALLOWED]


def test_no_import_circle_among_device_modules():
    assert _offending("kvedge") == []


def test_no_import_circle_among_host_modules():
    assert _offending("kvedge_host") == []


def test_the_check_sees_lazy_imports_and_circles():
    known = {"p", "p.a", "p.b", "p.c", "p.q", "p.q.d"}
    src = ("import os\nfrom . import b\nfrom p import Name\nclass K:\n    def f(self):\n        from .c import x\n"
           "        import p.q.d as d\n        import p.a\n")
    assert arrows("p.a", src, known) == {"p.b", "p", "p.c", "p.q.d"}
    assert arrows("p.q", "from .. import c\nfrom .d import y\n", known, is_package=True) == {"p.c", "p.q.d"}
    assert arrows("p.q.d", "from ..a import z\n", known) == {"p.a"}
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


if __name__ == "__main__":
    for top in ("kvedge", "kvedge_host"):
        found = circles(graph(top))
        print("%s: %d circle(s)" % (top, len(found)))
        for c in found:
            print("  " + " <-> ".join(c) + ("   (allowed)" if frozenset(c) in ALLOWED else ""))
    sys.exit(0)


def test_source_files_reach_every_module():
    """tools/test compiles the package from source on an emulated board (the m3-py runtime) for the device files
    tests/host/test_runtimes.py calls SOURCE_FILES: through their imports (lazy ones counted, and the test helpers'
    too) they reach every module of the package but the kernels of other chips (Thumb-2-, DSP- and Xtensa-only:
    the M3 cannot load them from source all) and the ulab pass's kernels. The test helpers are modules here too."""
    from kvedge_host.boards.deploy import DSP_ONLY, THUMB_ONLY, XTENSA_ONLY
    import test_runtimes
    dev = os.path.join(ROOT, "tests", "device")
    known = modules("kvedge")
    g = graph("kvedge")
    helpers = {n[:-3]: os.path.join(dev, n) for n in os.listdir(dev) if n.endswith(".py")}
    every = dict(known, **helpers)
    for name, path in helpers.items():
        with open(path, encoding="utf-8") as f:
            g[name] = arrows(name, f.read(), every)
    seen, todo = set(), [f[:-3] for f in test_runtimes.SOURCE_FILES]
    while todo:
        m = todo.pop()
        if m not in seen:
            seen.add(m)
            todo.extend(g.get(m, ()))
            if "." in m:  # importing a submodule runs its package's __init__ first
                todo.append(m.rsplit(".", 1)[0])
    other_chips = {p[:-3].replace("/", ".") for p in THUMB_ONLY + DSP_ONLY + XTENSA_ONLY}
    # the kinds' kernel modules are loaded by name (kvedge.kernels.first and select): the files that load every
    # kind a core has, as the board's own probe picks them
    kinds = ("plain", "native", "viper")
    by_name = {"kvedge.kernels." + r + k for r in ("", "q8_", "q4_") for k in kinds} | {"kvedge.kernels.f32_native"}
    assert by_name <= set(known), sorted(by_name - set(known))
    assert {"test_kernel_select.py", "test_intkernels.py", "test_w4kinds.py"} <= set(test_runtimes.SOURCE_FILES)
    missing = sorted(set(known) - seen - other_chips - by_name)
    assert missing == [], "no SOURCE_FILES file reaches %s" % missing
