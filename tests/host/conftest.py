"""Host tests: the CLI fuzzer's counts in pytest's closing summary; COLUMNS as the caller set it."""
import os

import pytest

# pytest-xdist's workers run with COLUMNS=80 (and LINES=24) in their environment, which `kvedge plan` reads as the
# width to wrap its first screen at (kvedge_host.cli.cmd_plan.say): a test (and the CLI it starts) sees COLUMNS
# only where it sets it itself, as under plain pytest
_COLUMNS = os.environ.get("COLUMNS") if os.environ.get("PYTEST_XDIST_WORKER") is None else None


@pytest.fixture(autouse=True)
def _columns_as_the_caller_set_them(monkeypatch):
    if _COLUMNS is None:
        monkeypatch.delenv("COLUMNS", raising=False)


@pytest.fixture(autouse=True)
def _tokenizer_known(tmp_path_factory, monkeypatch):
    """Without ../shared, plans count a stand-in tok512.bin in a fetch cache of the session's own, as a user who ran
    `kvedge fetch` has (the esp32's 100 KB holds stories260K with a tokenizer's 2,562 bytes counted, not with the
    3,588 reserved when none is known). A test that sets XDG_CACHE_HOME itself overrides it."""
    import _modelfiles
    base = _modelfiles.standin_fetch_cache(tmp_path_factory.getbasetemp() / "kvedge-fetch-cache")
    if base:
        monkeypatch.setenv("XDG_CACHE_HOME", base)


def pytest_terminal_summary(terminalreporter):
    try:
        from test_cli_fuzz import SUMMARY
    except ImportError:
        return
    if not SUMMARY:
        return
    tr = terminalreporter
    tr.write_sep("-", "CLI fuzzer")
    ip = SUMMARY.get("in_process")
    if ip:
        tr.write_line("in-process: %d cases, %d failed (%d refused with one line, %d succeeded) in %.1fs; "
                      "slowest %s" % (ip["cases"], ip["failed"], ip["outcomes"].get("error", 0),
                                      ip["outcomes"].get("ok", 0), ip["seconds"], ip["slowest"]))
        tr.write_line("per command: " + ", ".join("%s %d" % kv for kv in ip["per_command"].items()))
    sp = SUMMARY.get("subprocess")
    if sp:
        tr.write_line("subprocess: %d cases, %d failed in %.1fs" % (sp["cases"], sp["failed"], sp["seconds"]))
