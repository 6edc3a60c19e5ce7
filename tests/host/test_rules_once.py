"""Each rule is written once (issue 26): the kernel kinds, the fast kinds (whose integer paths are the default),
the cache dtypes, the integer-code dtypes and the Arm -march values are literals in one module each; every other
module imports them. A second literal copy of one of them in device/, host/ or tools/ fails here."""
import os
import re

import pytest

from kvedge import kernels, sizes
from kvedge_host.boards import deploy

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
RULES = {  # the rule's value, and where its one literal lives
    "kernel kinds": (kernels.KINDS, "device/kvedge/kernels/__init__.py"),
    "fast kernel kinds": (kernels.FAST, "device/kvedge/kernels/__init__.py"),
    "cache dtypes": (sizes.CACHE_DTYPES, None),  # written with the names F32..I2 in device/kvedge/sizes.py
    "integer-code dtypes": (sizes.INT_CODES, None),
    "Arm -march values": (deploy.THUMB_ARCHS, "host/kvedge_host/boards/deploy.py"),
}


def _literal(values):
    """A tuple or list literal of exactly these strings, in this order (either quote)."""
    inner = r"\s*,\s*".join(r"['\"]%s['\"]" % re.escape(v) for v in values)
    return re.compile(r"[(\[]\s*%s\s*,?\s*[)\]]" % inner)


def _sources():
    for top in ("device", "host", "tools"):
        for root, _, names in os.walk(os.path.join(ROOT, top)):
            for n in names:
                if n.endswith(".py"):
                    p = os.path.join(root, n)
                    yield os.path.relpath(p, ROOT), open(p, encoding="utf-8").read().splitlines()


def _code(line):
    return line.split("#", 1)[0]  # comments may name the values


@pytest.mark.parametrize("rule", sorted(RULES))
def test_each_rule_is_one_literal(rule):
    values, home = RULES[rule]
    pat = _literal(values)
    found = ["%s:%d" % (path, i + 1) for path, lines in _sources() for i, line in enumerate(lines)
             if pat.search(_code(line))]
    assert found == ([home + ":%d" % _line_of(home, pat)] if home else []), found


def _line_of(path, pat):
    lines = open(os.path.join(ROOT, path), encoding="utf-8").read().splitlines()
    return next(i + 1 for i, line in enumerate(lines) if pat.search(_code(line)))


def test_the_literal_search_finds_a_planted_copy():
    assert _literal(kernels.FAST).search('x = ("asm", "viper")')
    assert _literal(sizes.INT_CODES).search("if d in ['i8', 'i4', 'i2']:")
    assert not _literal(kernels.FAST).search('x = ("asm", "viper", "native")')
