"""The CLI fuzzer (issue 14): thousands of hostile inputs to every `kvedge` command that reads a file or an
argument. Each case must end with exit 2 and one stderr line `kvedge CMD: error: ...` naming the file (and the
field) or the flag, within a time limit and a memory bound, or succeed with the answer an independent
computation gives (tests/host/_fuzzcases.py). The bulk runs in-process (cli.main); a sample runs as real
subprocesses to prove the exit status and the single stderr line end to end.

The counts are printed in pytest's closing summary ("CLI fuzzer: ...")."""
import collections
import os
import random
import shutil
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

import _clifuzz as cf
import _fuzzcases as fc
from kvedge_host import profiles

SEED = 14
SUMMARY = {}  # read by tests/host/conftest.py for the closing summary
MIN_CASES = 2000


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    """Every case, built once: (cases, boards folder of the fuzzed profiles)."""
    tmp = str(tmp_path_factory.mktemp("clifuzz"))
    rng = random.Random(SEED)
    ck = fc.Ckpt(tmp)
    board_dir = os.path.join(tmp, "boards")
    os.makedirs(board_dir)
    for f in os.listdir(profiles.BOARDS):
        if f.endswith(".json"):
            shutil.copy(os.path.join(profiles.BOARDS, f), board_dir)
    cases = (fc.hf_cases(tmp) + fc.checkpoint_cases(ck, rng) + fc.model_run_cases(ck) + fc.tokenizer_cases(ck, rng)
             + fc.gguf_cases(tmp, rng) + fc.json_cases(tmp) + fc.quality_cases(tmp)
             + fc.board_cases(board_dir, profiles.BOARDS) + fc.flag_cases(ck, tmp))
    return cases, board_dir


def _family(case):
    return case.group.split(" ")[0]


def test_cli_fuzz_in_process(corpus, monkeypatch):
    cases, board_dir = corpus
    monkeypatch.setattr(profiles, "BOARDS", board_dir)  # the fuzzed profiles beside copies of the real ones
    t0 = time.perf_counter()
    failures = []
    per_cmd = collections.Counter()
    outcomes = collections.Counter()
    slowest = (0.0, None)
    for case in cases:
        res = cf.run_inprocess(case.argv)
        problem = cf.judge(case, res)
        per_cmd[case.cmd] += 1
        outcomes["error" if res.rc == 2 else "ok" if res.rc in case.ok_codes else "other"] += 1
        if res.seconds > slowest[0]:
            slowest = (res.seconds, case)
        if problem:
            failures.append("%r\n    -> %s" % (case, problem))
    took = time.perf_counter() - t0
    SUMMARY["in_process"] = {"cases": len(cases), "failed": len(failures), "seconds": took,
                             "per_command": dict(sorted(per_cmd.items())), "outcomes": dict(outcomes),
                             "slowest": "%.2fs %r" % (slowest[0], slowest[1])}
    print("\nCLI fuzzer in-process: %d cases (%d refused with one line, %d succeeded), %d failed, %.1fs; "
          "slowest %.2fs" % (len(cases), outcomes["error"], outcomes["ok"], len(failures), took, slowest[0]))
    assert len(cases) >= MIN_CASES
    assert not failures, "%d of %d cases failed:\n%s" % (len(failures), len(cases), "\n".join(failures[:40]))


def _sample(cases, n=48):
    """Cases for the subprocess run: spread over every fuzzed family and command, errors and successes."""
    by = collections.OrderedDict()
    for c in cases:
        try:
            [os.fsencode(a) for a in c.argv]
        except UnicodeError:
            continue  # a lone surrogate that no command line can carry (the in-process run covers it)
        if c.heavy or c.argv[0] in ("sim", "test", "monitor", "deploy", "demo") and c.expect != cf.ERROR:
            continue
        by.setdefault((_family(c), c.cmd, c.expect), []).append(c)
    rng = random.Random(SEED)
    picked = []
    while len(picked) < n and by:
        for key in list(by):
            pool = by[key]
            picked.append(pool.pop(rng.randrange(len(pool))))
            if not pool:
                del by[key]
            if len(picked) >= n:
                break
    return picked


def test_cli_fuzz_subprocess_sample(corpus):
    """The same cases through `python -m kvedge_host.cli`: exit status and the one stderr line end to end,
    identical to the in-process line."""
    cases, board_dir = corpus
    sample = [c for c in _sample(cases) if "board profile" not in c.group]  # profiles need the patched folder
    t0 = time.perf_counter()
    with ThreadPoolExecutor(2) as ex:
        results = list(ex.map(lambda c: cf.run_subprocess(c.argv), sample))
    failures = []
    for case, res in zip(sample, results):
        problem = cf.judge(case, res)
        if problem is None and res.rc == 2:
            again = cf.run_inprocess(case.argv)
            if again.err.strip() != res.err.strip():
                problem = "in-process and subprocess lines differ: %r vs %r" % (again.err, res.err)
        if problem:
            failures.append("%r\n    -> %s" % (case, problem))
    SUMMARY["subprocess"] = {"cases": len(sample), "failed": len(failures), "seconds": time.perf_counter() - t0}
    print("\nCLI fuzzer subprocesses: %d cases, %d failed" % (len(sample), len(failures)))
    assert len(sample) >= 40
    assert not failures, "\n".join(failures)
