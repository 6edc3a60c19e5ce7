"""Host tests: the CLI fuzzer's counts in pytest's closing summary."""


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
