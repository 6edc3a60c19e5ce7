"""The documentation cannot drift from the code: every ```sh runnable block of README.md and docs/*.md is run
(each line starting with `kvedge ` is a command, run as `python -m kvedge_host.cli ...` from the repository root;
the lines after it are substrings its output must contain), every ```python runnable block runs as a script on
CPython with the device package importable, and every relative link points to a file that exists. A command
that names ../shared is skipped, with the reason, where that folder is absent."""
import glob
import os
import re
import shlex
import subprocess
import sys

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
SHARED = os.path.join(os.path.dirname(ROOT), "shared")
PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
FENCE = re.compile(r"^```sh runnable[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
PYFENCE = re.compile(r"^```python runnable[ \t]*\n(.*?)^```[ \t]*$", re.M | re.S)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def rel(path):
    return os.path.relpath(path, ROOT)


def blocks(text):
    """[(command, [expected substrings])] of every runnable block, in order."""
    out = []
    for body in FENCE.findall(text):
        for line in body.splitlines():
            if line.startswith("kvedge "):
                out.append((line, []))
            elif line.strip():
                if not out:
                    raise ValueError("expected output before any command: %r" % line)
                out[-1][1].append(line.strip())
    return out


def commands():
    found = []
    for page in PAGES:
        with open(page) as f:
            text = f.read()
        for i, (cmd, expected) in enumerate(blocks(text)):
            found.append(pytest.param(cmd, expected, id="%s:%d" % (rel(page), i + 1)))
    return found


COMMANDS = commands()


def scripts():
    found = []
    for page in PAGES:
        with open(page) as f:
            for i, body in enumerate(PYFENCE.findall(f.read())):
                found.append(pytest.param(body, id="%s:py%d" % (rel(page), i + 1)))
    return found


SCRIPTS = scripts()


def test_blocks_parse_commands_and_expected_lines():
    text = "x\n```sh runnable\nkvedge boards\nrp2040\n\nkvedge boards esp32\n```\n```sh\nkvedge nope\n```\n"
    assert blocks(text) == [("kvedge boards", ["rp2040"]), ("kvedge boards esp32", [])]
    with pytest.raises(ValueError):
        blocks("```sh runnable\nstray\n```\n")


def test_the_docs_hold_runnable_commands():
    # the README's worked example and the budget line at least; a page losing its blocks would pass silently
    assert len(COMMANDS) >= 3
    assert any(p.id.startswith("README.md:") for p in COMMANDS)


@pytest.mark.parametrize("cmd,expected", COMMANDS)
def test_documented_command_runs(cmd, expected):
    if "../shared" in cmd and not os.path.isdir(SHARED):
        pytest.skip("needs %s (the shared models and runtimes), absent here" % SHARED)
    argv = shlex.split(cmd)[1:]
    env = dict(os.environ, COLUMNS="200")
    p = subprocess.run([sys.executable, "-m", "kvedge_host.cli"] + argv, cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300)
    out = p.stdout + p.stderr
    assert p.returncode == 0, "%s\nexit %d\n%s" % (cmd, p.returncode, out[-3000:])
    flat = " ".join(out.split())
    for want in expected:
        assert " ".join(want.split()) in flat, "%s: %r not in its output:\n%s" % (cmd, want, out[-3000:])


@pytest.mark.parametrize("code", SCRIPTS)
def test_documented_python_runs(code):
    env = dict(os.environ, PYTHONPATH=os.path.join(ROOT, "device"))
    p = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env=env, capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, "exit %d\n%s" % (p.returncode, (p.stdout + p.stderr)[-3000:])


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_point_to_existing_files(page):
    with open(page) as f:
        text = f.read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code blocks hold no links
    missing = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor on the same page
        path = target.split("#", 1)[0]
        if not os.path.exists(os.path.join(os.path.dirname(page), path)):
            missing.append(target)
    assert missing == [], "%s links to missing files: %s" % (rel(page), missing)
