"""Comments and docs cite what the project ships: the eight traps of docs/architecture.md, not ../shared/SPEC.md
(which users do not have), and figures by the command that reproduces them, not by a commit of this repository."""
import os
import re
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
FOLDERS = ("device", "host", "tests", "tools", "docs")
THIS = os.path.relpath(os.path.abspath(__file__), ROOT)

# Files that may name SPEC.md, and why: each is about the unshipped file itself, never a citation of it.
SPEC_ALLOWED = {
    "tests/host/test_boards.py": "asserts that no board profile cites SPEC.md",
    THIS: "this test",
}


def sources():
    """(relative path, text) of every .py and .md the checks cover."""
    paths = [os.path.join(ROOT, "README.md")]
    for top in FOLDERS:
        for d, dirs, files in os.walk(os.path.join(ROOT, top)):
            dirs[:] = [x for x in dirs if not x.startswith(".") and x not in ("node_modules", "__pycache__")]
            paths += [os.path.join(d, f) for f in files if f.endswith((".py", ".md"))]
    for p in sorted(paths):
        with open(p, encoding="utf-8") as f:
            yield os.path.relpath(p, ROOT).replace(os.sep, "/"), f.read()


def pages():
    """README.md and docs/*.md."""
    return [(p, t) for p, t in sources() if p == "README.md" or re.match(r"docs/[^/]+\.md$", p)]


def test_nothing_cites_the_unshipped_spec():
    bad = []
    for path, text in sources():
        if path in SPEC_ALLOWED:
            continue
        for n, line in enumerate(text.splitlines(), 1):
            if re.search(r"SPEC\.md|\bSPEC sections?\b", line):
                bad.append("%s:%d: %s" % (path, n, line.strip()))
    assert bad == [], "cite the project's own docs instead:\n" + "\n".join(bad)


def test_every_trap_cited_has_its_heading_in_architecture_md():
    with open(os.path.join(ROOT, "docs", "architecture.md"), encoding="utf-8") as f:
        have = set(re.findall(r"^#+ Trap ([1-8]):", f.read(), re.M))
    assert have == set("12345678"), "docs/architecture.md needs a 'Trap N:' heading for each of the eight traps"
    cited = {}
    for path, text in sources():
        for m in re.finditer(r"\btraps? ([1-8])((?:(?:, | and )[1-8])*)", text, re.I):
            for n in re.findall(r"[1-8]", m.group(0)):
                cited.setdefault(n, path)
    missing = {n: p for n, p in cited.items() if n not in have}
    assert missing == {}, "trap cited (first file) without a heading in docs/architecture.md: %s" % missing


def git(*args):
    return subprocess.run(["git", "-C", ROOT] + list(args), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                          universal_newlines=True)


def test_docs_cite_commands_not_commits():
    try:
        inside = git("rev-parse", "--is-inside-work-tree").stdout.strip() == "true"
    except OSError:
        inside = False
    if not inside:
        pytest.skip("not a git checkout: no commits to look tokens up in")
    found = []
    for path, text in pages():
        for n, line in enumerate(text.splitlines(), 1):
            for tok in set(re.findall(r"(?<![\w./-])[0-9a-f]{7,12}(?![\w/-])", line)):
                if not re.search(r"[a-f]", tok):
                    continue  # a plain number (figures), whatever a commit prefix it may match
                if git("rev-parse", "--verify", "--quiet", tok + "^{commit}").returncode == 0:
                    found.append("%s:%d: %s" % (path, n, tok))
    assert found == [], "name the command that reproduces the figure (and the date) instead of a commit:\n" + \
        "\n".join(found)
