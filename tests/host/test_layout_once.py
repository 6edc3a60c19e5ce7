"""The arena's layout has one owner (issue 26): no device module but kvedge/cache.py reads the region offsets and
row pitches it derives offsets from (.DATA, .META, .VMETA, .PRE, .RES, .prow, .frow, ._rowidx); the others read
the cache's accessors (base, row_at, scale_at, prefix_at, residual_at, row_pitch, f32_pitch) or have it fill the
kernels' blocks (head_geo, layer_geo, point_tile, q8_store_block, write_q8_at, runs). And the index of every word of
those blocks is one const() name in kvedge/kernels/words.py, assigned nowhere else."""
import ast
import os

from kvedge_host.paths import DEVICE

PKG = os.path.join(DEVICE, "kvedge")
# the cache, its int8-code writes (KVCacheQ8's and its stubs' code), and the split cache's own layout
# (kvedge.kvsplit.SplitCache: K and V in formats of their own)
OWNERS = ("cache.py", "q8rows.py", "q8writes.py", "kvsplit.py")
LAYOUT = os.path.join("kernels", "words.py")
FIELDS = ("DATA", "META", "VMETA", "PRE", "RES", "prow", "frow", "_rowidx")


def _modules():
    for root, _, names in os.walk(PKG):
        for n in sorted(names):
            if n.endswith(".py"):
                p = os.path.join(root, n)
                yield os.path.relpath(p, PKG), open(p, encoding="utf-8").read()


def layout_reads(src):
    """(line, field) of every attribute access to a layout field in a module's source."""
    return [(node.lineno, node.attr) for node in ast.walk(ast.parse(src))
            if isinstance(node, ast.Attribute) and node.attr in FIELDS]


def assigned_names(src):
    """Names bound by an assignment anywhere in a module's source."""
    out = set()
    for node in ast.walk(ast.parse(src)):
        if isinstance(node, (ast.Assign, ast.AnnAssign, ast.AugAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for t in targets:
                for n in (t.elts if isinstance(t, (ast.Tuple, ast.List)) else [t]):
                    if isinstance(n, ast.Name):  # a name bound, not one read in a subscript (geo[G_P] = ...)
                        out.add(n.id)
    return out


def test_no_module_but_the_cache_reads_the_arena_layout():
    found = []
    for rel, src in _modules():
        if rel not in OWNERS:
            found += ["device/kvedge/%s:%d: .%s" % (rel, line, f) for line, f in layout_reads(src)]
    assert not found, "arena offsets outside kvedge/cache.py (use the cache's accessors):\n" + "\n".join(found)


def test_the_search_finds_a_planted_offset_and_passes_the_accessors():
    planted = "def f(c, layer, b):\n    return c.DATA + ((layer * 2) * c.H) * c.B * c.prow + b\n"
    assert layout_reads(planted) == [(2, "DATA"), (2, "prow")]
    assert layout_reads("x = c.row_at(l, 0, h, b) + c.row_pitch()  # c.DATA in a comment\ny = 'c.META'\n") == []
    owner = dict(_modules())[OWNERS[0]]
    assert layout_reads(owner), "the owner reads its own fields: the search must see them"


def test_every_block_index_is_one_const_name_in_words():
    mods = dict(_modules())
    tree = ast.parse(mods[LAYOUT])
    names = []
    for node in tree.body:
        if isinstance(node, ast.Assign):
            v = node.value
            assert isinstance(v, ast.Call) and getattr(v.func, "id", "") == "const", ast.dump(node)
            names += [t.id for t in node.targets]
    assert {"T_HDR", "R_SLOT", "G_END", "G_M", "LG_LAM", "P_HDR", "S_WORDS", "VMAX"} <= set(names)
    again = []
    for rel, src in mods.items():
        if rel != LAYOUT:
            again += ["device/kvedge/%s: %s" % (rel, n) for n in sorted(assigned_names(src) & set(names))]
    assert not again, "block indexes assigned outside kvedge/kernels/words.py:\n" + "\n".join(again)
    assert assigned_names("P_HDR = const(8)\nT_N, T_D = 0, 1\ngeo[G_P] = 0\n") == {"P_HDR", "T_N", "T_D"}
