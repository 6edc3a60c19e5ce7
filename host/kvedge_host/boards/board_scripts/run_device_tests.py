# kvedge test --port (kvedge_host.cli.cmd_test.run_suite): one device test file on the board, through the test
# runner sent beside the tests (tools/devrunner.py).
# Parameters (prepended by the host): BOARD_DIR, the board folder of the tests and the runner; FILE, the test
# file's name; CIRCUITPYTHON, a bool; ONLY, a test name filter or None.
import sys
sys.path.insert(0, BOARD_DIR)
import devrunner
devrunner.main([FILE], circuitpython=CIRCUITPYTHON, only=ONLY)
