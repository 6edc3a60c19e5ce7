"""Every `kvedge SUB --help` is complete: its description and every option's help end where a sentence ends, never
mid-sentence (issue 23: the description was the docstring's first line, cut wherever the docstring wrapped)."""
import os
import re
import subprocess
import sys

import pytest

from kvedge_host import cli

# words a sentence does not end on: "a tiered cache (hot ring in", "with the cache", "heap,"
_DANGLING = {"a", "an", "the", "in", "on", "of", "to", "for", "with", "and", "or", "by", "from", "at", "as", "its",
             "is", "are", "than", "that", "which", "into", "per", "nor", "but", "when", "if", "else", "then"}


def unfinished(text):
    """Why `text` reads as cut off (a reason), or None."""
    t = " ".join(text.split())
    if not t:
        return "empty"
    for o, c in ("()", "[]", "{}"):
        if t.count(o) != t.count(c):
            return "unbalanced %s%s" % (o, c)
    if t.count("`") % 2:
        return "unbalanced `"
    if t[-1] in ",;:(-/":
        return "ends with %r" % t[-1]
    last = re.sub(r"[^a-z]", "", t.split()[-1].lower())
    if last in _DANGLING and not t.endswith((")", ".", "'", '"')):
        return "ends on %r" % last
    return None


def sentence_unfinished(text):
    """unfinished(), and a description is sentences: it ends with a full stop (or a closing parenthesis)."""
    why = unfinished(text)
    if why is None and not text.rstrip().endswith((".", ")")):
        return "no full stop at the end"
    return why


def test_unfinished_reads_the_cut_offs_of_issue_23():
    # the three cut-offs the issue quotes, and text that is whole
    for cut in ("Compress until it fits: ... a tiered cache (hot ring in",
                "The whole story on a virtual board: plan the cache for a model, deploy, generate on the board "
                "with the cache", "live view of cache use against budget, heap,"):
        assert sentence_unfinished(cut), cut
    assert unfinished("a tiered cache (hot ring in") and unfinished("heap,") and unfinished("keep the")
    assert sentence_unfinished("Plans a cache.") is None
    for whole in ("board profile (default: rp2040)", "prints the plan.", "KV dtype: f32, f16, i8 or i4",
                  "do not count the tokenizer"):
        assert unfinished(whole) is None, whole


def _subcommands():
    ap = cli.build_parser()
    sub = next(a for a in ap._actions if a.__class__.__name__ == "_SubParsersAction")
    return sub.choices


SUBS = sorted(_subcommands())


def test_every_command_has_a_help_test():
    assert len(SUBS) == len([n for n in cli.COMMANDS if cli._load(n) is not None])
    assert {"plan", "demo", "monitor", "budget", "fetch"} <= set(SUBS)


@pytest.mark.parametrize("name", SUBS)
def test_help_is_complete(name):
    # the real command line, as a user runs it
    r = subprocess.run([sys.executable, "-m", "kvedge_host.cli", name, "--help"], capture_output=True,
                       text=True, timeout=60, env=dict(os.environ, COLUMNS="100"))
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("usage: kvedge " + name)
    p = _subcommands()[name]
    desc = p.description or ""
    # the description ends a sentence, and the whole of it is printed (argparse re-wraps it: compare words)
    assert sentence_unfinished(desc) is None, (name, sentence_unfinished(desc), desc[-60:])
    assert " ".join(desc.split()) in " ".join(r.stdout.split()), name
    for a in p._actions:
        # every option says what it does (--kernels, --runtime, --baud, demo's --temperature and --seed had no help)
        assert a.help, (name, a.option_strings or a.dest, "no help")
        if a.help and a.help != "==SUPPRESS==":
            text = a.help % dict(vars(a), prog=p.prog) if "%" in a.help else a.help
            assert unfinished(text) is None, (name, a.option_strings or a.dest, unfinished(text), text[-60:])
