"""The documentation cannot drift from the code: every command shown in a fenced block of README.md and
docs/*.md is run by a test, or listed below with the reason it is not, and every relative link points to a file
that exists. A fenced block that shows a command (a line starting with `kvedge`, `mpremote`, `tools/...`,
`.venv/bin/...`, `python` or `pytest`, optionally after NAME=value settings) says how it is run:

- ```sh runnable: each command runs as written; the block holds commands only (a line that is not a command,
  a continuation or a comment fails the test: pasted, it would run as shell; so in ```sh board and ```sh blocks).
  The ```output block right after it holds substrings the block's commands' output (all of it, in order) must
  hold (after a board block: its last command's).
- ```sh board: run against one virtual board, which the doc test starts from the docs' own `kvedge sim ... &`
  line; the placeholder ports (/dev/ttyACM0, /dev/ttyUSB0, COM3, PORT) become that board's port.
- ```sh synopsis: a usage line: every option it shows must be one the command accepts, every `a|b|c` one of
  the option's choices (checked against the command's own argument parser).
- ```sh: each command is in SMALLER (run with the smaller arguments given there, and why), ELSEWHERE (another
  test runs it: that test is named, and must hold the command's arguments or read the page itself) or NOT_RUN
  (why it cannot run here).
- ```python runnable runs as a script on CPython with the device package importable; any other ```python
  block (calls over the reader's own data) runs after a prelude in STANDINS that defines that data.
A command shown in a fence without one of these, or in an indented code block, fails the test; so does an entry
of SMALLER/ELSEWHERE/NOT_RUN/STANDINS that no page shows any more. Commands quoted in prose (`kvedge plan --top 3`)
must name a real command or script and only options it accepts.

What the test changes in a command, and nothing else: commands run in a scratch folder whose entries are links
to the checkout's (so `docs/...`, `device/...` and `../shared/...` resolve as from the repository root and files
a command writes land in the scratch folder); `/tmp/X` becomes the scratch folder's `tmp/X`; `kvedge` is
`python -m kvedge_host.cli`, `.venv/bin/python` and `python` are the interpreter running the tests, `mpremote`
the virtual environment's; in board blocks the placeholder ports become the virtual board's; XDG_CACHE_HOME is the
scratch folder's `cache` (a virtual board's default filesystem starts empty there, not in ~/.cache). A command that
needs ../shared (the models and board runtimes) is skipped, with the reason, where that folder is absent."""
import glob
import inspect
import os
import re
import shlex
import signal
import subprocess
import sys
import time

import pytest

from kvedge_host.paths import ROOT, SHARED, venv_tool

PAGES = [os.path.join(ROOT, "README.md")] + sorted(glob.glob(os.path.join(ROOT, "docs", "*.md")))
FENCE = re.compile(r"^```([^`\n]*)\n(.*?)^```[ \t]*$", re.M | re.S)
COMMAND = re.compile(r"^(?:[A-Z][A-Z0-9_]*=\S+ +)*(kvedge|mpremote|tools/\S+|\.venv/bin/\S+|python3?|pytest)(?:\s|$)")
INDENTED = re.compile(r"^(?: {4,}|\t)(?:[A-Z][A-Z0-9_]*=\S+ +)*(?:kvedge|mpremote|tools/|\.venv/bin/)\S*", re.M)
LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
PORTS = ("/dev/ttyACM0", "/dev/ttyUSB0", "COM3", "PORT")
MODES = ("runnable", "board", "synopsis", "")

# Shown as measured; run here with smaller arguments (the same program and code path, fewer tokens/points).
# doc command -> (what runs, why smaller)
SMALLER = {
    ".venv/bin/python tools/bench_chat.py --runtime m3":
        (".venv/bin/python tools/bench_chat.py --runtime m3 --max-new 4",
         "32 reply tokens a turn take about a minute of the emulated board"),
    "kvedge generate --steps 256":
        ("kvedge generate --model ../shared/models/stories260K.bin --steps 48",
         "256 CPython steps take ~16 s; the default model named explicitly (a worktree's default ../shared may "
         "differ from the scratch folder's)"),
    ".venv/bin/python tools/bench_cache.py --runtime both":
        (".venv/bin/python tools/bench_cache.py --runtime both --shape d64 --reads 8",
         "one shape and fewer reads: seconds instead of ~10 s"),
    ".venv/bin/python tools/bench_attention.py":
        (".venv/bin/python tools/bench_attention.py --tokens 64 --reps 1 --rounds 1",
         "every point at 64 tokens, one round: the 1024-token float step alone takes ~0.8 s x 25"),
    "tools/bench_model.py --tokens 32":
        ("tools/bench_model.py --weights i8 --caches i8 --kernels viper --contexts 16 --tokens 2 --repeat 1",
         "the full matrix prefills 256 and 512 tokens per figure, most on the float path: minutes"),
    "tools/bench_model.py --weights i8 --caches i8 --kernels viper --tokens 32":
        ("tools/bench_model.py --weights i8 --caches i8 --kernels viper --contexts 16 --tokens 2 --repeat 1",
         "a 16-token context and 2 timed steps instead of 256/512 and 32 x 3"),
    "tools/bench_model.py --weights i8 --caches f16 i4 --kernels viper --tokens 32 --repeat 1":
        ("tools/bench_model.py --weights i8 --caches f16 i4 --kernels viper --contexts 40 --tokens 2 --repeat 1",
         "a 40-token context (not a whole i4 key group: the bench rounds the slots up) and 2 timed steps instead of 256/512 and 32"),
    ".venv/bin/python tools/bench_attention.py --dtype i4 --tokens 64,256 --no-float":
        (".venv/bin/python tools/bench_attention.py --dtype i4 --tokens 64 --no-float --reps 1 --rounds 1",
         "one point, one round"),
    ".venv/bin/python tools/bench_cache.py --runtime m3":
        (".venv/bin/python tools/bench_cache.py --runtime m3 --shape d64 --reads 2",
         "the shape that fits, 2 reads: the emulated board's boot dominates (~9 s)"),
    ".venv/bin/python tools/bench_cache.py --runtime m3 --shape stories --align 0":
        (".venv/bin/python tools/bench_cache.py --runtime m3 --shape stories --align 0 --reads 2", "2 reads"),
    ".venv/bin/python tools/bench_attention.py --runtime m3 --tokens 64,128":
        (".venv/bin/python tools/bench_attention.py --runtime m3 --tokens 32 --no-float",
         "one 32-token point without the float path (its 128-token step alone is 0.5 G instructions)"),
    ".venv/bin/python tools/bench_model.py --runtime m3 --weights i8 --caches i8 --kernels viper plain --contexts 128 "
    "--tokens 8":
        (".venv/bin/python tools/bench_model.py --runtime m3 --weights i8 --caches i8 --kernels viper --contexts 32 "
         "--tokens 2", "viper only (a plain token is 0.75 G instructions), a 32-token context, 2 tokens"),
    ".venv/bin/python tools/bench_rom.py":
        (".venv/bin/python tools/bench_rom.py --tokens 2 --context 16", "2 tokens at a 16-token context"),
    ".venv/bin/python tools/mprun.py --runtime unix":
        (".venv/bin/python tools/mprun.py --runtime unix -k test_budget_layers",
         "one file: tests/host/test_runtimes.py runs every file on every runtime"),
    ".venv/bin/python tools/mprun.py --runtime wasm":
        (".venv/bin/python tools/mprun.py --runtime wasm -k test_budget_layers", "one file (as above)"),
    ".venv/bin/python tools/mprun.py --runtime m3":
        (".venv/bin/python tools/mprun.py --runtime m3 -k test_budget_layers", "one file (as above)"),
    ".venv/bin/python tools/mprun.py --runtime m3-py":
        (".venv/bin/python tools/mprun.py --runtime m3-py -k test_budget_layers", "one file (as above)"),
    ".venv/bin/python tools/mprun.py --runtime m0":
        (".venv/bin/python tools/mprun.py --runtime m0 -k test_budget_layers", "one file (as above)"),
    ".venv/bin/python tools/mprun.py --runtime m7":
        (".venv/bin/python tools/mprun.py --runtime m7 -k test_budget_layers", "one file (as above)"),
    ".venv/bin/python tools/mprun.py --runtime xt":
        (".venv/bin/python tools/mprun.py --runtime xt -k test_budget_layers", "one file (as above)"),
    ".venv/bin/python tools/mprun.py --runtime m55 -k dsp":
        (".venv/bin/python tools/mprun.py --runtime m55 -k dsp", "as shown (one file)"),
    ".venv/bin/python tools/mprun.py --runtime circuitpython":
        (".venv/bin/python tools/mprun.py --runtime circuitpython -k test_budget_layers", "one file (as above)"),
    "kvedge eval":
        ("kvedge eval --samples 1 --tokens 40 --window 16 --texts sampled",
         "the full run takes ~8 minutes (the written corpus alone is 3,890 tokens); one 40-token sampled text"),
    "kvedge eval --json > host/kvedge_host/data/quality-stories260K.json":
        ("kvedge eval --json --samples 1 --tokens 40 --window 16 --texts sampled > /tmp/kvedge-doc-quality.json",
         "the stored table is rewritten only by hand; this writes a small table to a scratch file"),
    "kvedge eval --json --only \"k i8\" --only \"k i4\" --only \"k f16\" --only i8 --only \"i4 KIVI\"":
        ("kvedge eval --json --only \"k i8\" --only \"k f16\" --samples 1 --tokens 40 --texts sampled",
         "about 25 minutes on a loaded machine; one 40-token sampled text and the splits with i8 or f16 keys"),
    "kvedge eval --json --only tiered":
        ("kvedge eval --json --only tiered --samples 1 --tokens 64 --texts sampled",
         "one 64-token sampled text"),
    "kvedge eval --texts sampled --samples 3 --tokens 256 --only \"(the f32 reference only)\" --forward float "
    "--forward int":
        ("kvedge eval --texts sampled --samples 1 --tokens 32 --only \"(the f32 reference only)\" --forward float "
         "--forward int", "one 32-token text: the two device passes run on CPython with plain kernels"),
    "kvedge eval --samples 8 --seed 1 --long":
        ("kvedge eval --samples 1 --seed 1 --tokens 32 --window 16 --long --contexts 1 --texts sampled --only "
         "\"sinks 4 + window\"", "8 texts and a 3-context stream take many minutes (2 contexts of one strategy: "
         "40 s); one text, one context, one strategy"),
    ".venv/bin/python tools/bench_parts.py --runtime m3":
        (".venv/bin/python tools/bench_parts.py --runtime m3 --context 8 --tokens 1",
         "a short context and one timed step: the parts' wrappers and the board run, in seconds (the tool once "
         "staged the weights under a name the board did not read, and nothing ran it)"),
    ".venv/bin/python tools/bench_tiered.py --runtime m3 --blocks 0,2,4,8 --float --save":
        (".venv/bin/python tools/bench_tiered.py --runtime m3 --blocks 2 --reps 1",
         "one point, the integer path only (16 s with 0,2); --save would rewrite host/kvedge_host/plan/tiered_cost.py"),
    "KVEDGE_FUZZ_SCALE=20 .venv/bin/python -m pytest -q -s tests/device/test_fuzz_tiered.py":
        ("KVEDGE_FUZZ_SCALE=1 .venv/bin/python -m pytest -q -s tests/device/test_fuzz_tiered.py",
         "scale 20 runs for minutes; scale 1 (what the suite runs) takes seconds"),
}

# Run by another test: doc command -> (test file, test function, what it runs)
ELSEWHERE = {
    "kvedge demo --board esp32s3-n16r8 --random stories15m --plain --steps 14 --prompt Lily --stats-ms 1000 "
    "--workdir /tmp/kvedge-15m":
        ("tests/host/test_demo_15m.py", "test_a_stories15m_shaped_int4_model_runs_its_plan_on_the_emulated_psram_board",
         "the same demo (its own work folder), its plan, peak and greedy text checked"),
    "kvedge fetch": ("tests/host/test_fetch.py", "test_a_good_download_lands_in_the_cache_and_generate_finds_it",
                     "downloads from the Hub: run against a stand-in of the Hub on 127.0.0.1, never the network"),
    "kvedge test --sim rp2040 --mpy -k test_budget.py":
        ("tests/host/test_board_e2e.py", "test_kvedge_test_runs_device_files_on_the_virtual_rp2040",
         "device files on a virtual rp2040"),
    "kvedge demo --board rp2040 --plain --steps 6 --stats-ms 100":
        ("tests/host/test_demo_boards.py", "test_the_demo_runs_its_plan_on_every_board_profile",
         "the demo on every profile's emulated board, peak heap against the plan", {"rp2040": "profiles.names()"}),
    "kvedge demo --port /dev/ttyACM0 --board rp2040 --workdir pico":
        ("tests/host/test_own_board.py", "test_micropython_board_commands_on_the_emulated_board",
         "reads README's On your own board and runs each command on the emulated Cortex-M3"),
    "kvedge generate --port /dev/ttyACM0 --board rp2040 --model pico/model.i8.bin --tokenizer pico/tok.bin --plan "
    "pico/plan.json --prompt \"Lily\" --steps 64":
        ("tests/host/test_own_board.py", "test_micropython_board_commands_on_the_emulated_board", "as above"),
    "kvedge demo --port /dev/ttyACM0 --board rp2350 --workdir pico2":
        ("tests/host/test_own_board.py", "test_micropython_board_commands_on_the_emulated_board", "as above"),
    "kvedge generate --port /dev/ttyACM0 --board rp2350 --model pico2/model.i8.bin --tokenizer pico2/tok.bin --plan "
    "pico2/plan.json --prompt \"Lily\" --steps 64":
        ("tests/host/test_own_board.py", "test_micropython_board_commands_on_the_emulated_board", "as above"),
    "kvedge demo --port /dev/ttyACM0 --board esp32s3 --workdir s3":
        ("tests/host/test_own_board.py", "test_micropython_board_commands_on_the_emulated_board", "as above"),
    "kvedge generate --port /dev/ttyACM0 --board esp32s3 --model s3/model.i8.bin --tokenizer s3/tok.bin --plan "
    "s3/plan.json --prompt \"Lily\" --steps 64":
        ("tests/host/test_own_board.py", "test_micropython_board_commands_on_the_emulated_board", "as above"),
    "kvedge convert ~/.cache/kvedge/models/stories260K.bin -o stories260K.i8.bin":
        ("tests/host/test_own_board.py", "test_circuitpython_board_commands_on_real_circuitpython",
         "README's CircuitPython commands on the CircuitPython interpreter, a folder as its drive"),
    "kvedge plan --model stories260K.i8.bin --board rp2040-circuitpython --weights-dtype i8 --kv-dtype i8 --align 0 "
    "--workspace 90128 --out cp.json":
        ("tests/host/test_own_board.py", "test_circuitpython_board_commands_on_real_circuitpython", "as above"),
    "kvedge deploy --drive /media/$USER/CIRCUITPY --board rp2040-circuitpython --config cp.json --weights "
    "stories260K.i8.bin --tokenizer ~/.cache/kvedge/models/tok512.bin --set STEPS=64":
        ("tests/host/test_own_board.py", "test_circuitpython_board_commands_on_real_circuitpython", "as above"),
    "kvedge monitor --port /dev/ttyACM0 --until final":
        ("tests/host/test_own_board.py", "test_circuitpython_board_commands_on_real_circuitpython", "as above"),
    "kvedge convert path/to/my-llama -o my-llama.i8.bin":
        ("tests/host/test_convert_hf.py", "test_the_model_page_commands_run",
         "reads model.md's block and runs it on a Hugging Face folder, a GGUF and an export.py file it writes"),
    "kvedge convert my-llama.Q8_0.gguf -o my-llama-gguf.i8.bin":
        ("tests/host/test_convert_hf.py", "test_the_model_page_commands_run", "as above"),
    "kvedge convert stories15M_q80.bin --weights-dtype f32 -o stories15M.f32.bin":
        ("tests/host/test_convert_hf.py", "test_the_model_page_commands_run", "as above"),
    "kvedge generate --model my-llama.i8.bin --tokenizer tok400.bin --prompt \"Once upon a time\" --steps 32":
        ("tests/host/test_convert_hf.py", "test_the_model_page_commands_run", "as above"),
}

NOT_RUN = {
    ".venv/bin/python tools/bench_pool.py --runtime m3 --board rp2350":
        "a benchmark (figures in docs/pool.md): the page's runnable block runs the same on CPython, and "
        "tests/host/test_runtimes.py runs tests/device/test_pool_model.py on the emulated boards",
    ".venv/bin/python tools/bench_pool.py --runtime m3 --board rp2350 --prompt 60":
        "a benchmark (figures in docs/pool.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --heap 4194304 --model "
    "/tmp/kvedge-15m/random/stories15m.bin --weights-dtype i4 --rom --cache max_tokens=256 --context 251 --tokens 4 "
    "--forward auto --kernels asm":
        "a benchmark (figures in docs/benchmarks.md, minutes of emulated board for a 15M-class model): "
        "tests/host/test_demo_15m.py runs the same model on the same board",
    ".venv/bin/python tools/bench_forward.py --runtime m7 --heap 2097152 --model "
    "/tmp/kvedge-15m/random/stories15m.bin --weights-dtype i4 --rom --cache max_tokens=256 --context 251 --tokens 4 "
    "--forward auto --kernels asm":
        "a benchmark (figures in docs/benchmarks.md, minutes of emulated board): tests/host/test_big_rom.py checks "
        "the larger ROMFS slot it reads the weights from",
    ".venv/bin/python tools/bench_forward.py --runtime xt --heap 2097152 --model "
    "/tmp/kvedge-15m/random/stories15m.bin --weights-dtype i4 --rom --cache max_tokens=256 --context 251 --tokens 4 "
    "--forward auto --kernels viper":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime xt --heap 2097152 --model "
    "/tmp/kvedge-15m/random/stories15m.bin --weights-dtype i4 --rom --cache max_tokens=256 --context 251 --tokens 4 "
    "--forward auto --kernels viper --no-asm":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_15m.py --runtime RT":
        "a benchmark per core, RT named in the table beside it (figures in docs/benchmarks.md, minutes of emulated "
        "board each): tests/device/test_w4kinds.py holds the int4 pass's bits on those cores",
    ".venv/bin/python tools/bench_15m.py --runtime xt --no-asm":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --heap 4194304 --model "
    "/tmp/kvedge-15m/random/stories15m.bin --weights-dtype i4 --rom --cache max_tokens=256 --context 251 --tokens 4 "
    "--forward auto --kernels asm viper":
        "a benchmark (figures in docs/model.md, ~80 s of emulated board for a 15M-class model): "
        "tests/host/test_demo_15m.py runs the same model on the same board",
    ".venv/bin/python tools/bench_forward.py --runtime m0 --rom --cache max_tokens=96,window=92,sinks=4 --forward "
    "auto --kernels asm viper":
        "a benchmark (figures in docs/benchmarks.md): tests/host/test_runtimes.py runs the device suite on the M0",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --heap 215040 --march armv6m --rom --cache "
    "max_tokens=96,window=92,sinks=4 --forward auto --kernels asm viper":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime m7 --heap 460800 --rom --forward auto --kernels asm viper":
        "a benchmark (figures in docs/benchmarks.md): tests/host/test_runtimes.py runs the device suite on the M7",
    ".venv/bin/python tools/bench_forward.py --runtime xt --forward int --macs":
        "a benchmark (figures in docs/benchmarks.md): tests/host/test_runtimes.py runs device files on the Xtensa "
        "stand-in",
    ".venv/bin/python tools/bench_forward.py --runtime m0 --kernels asm --forward int --macs":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_xtensa.py":
        "a benchmark of the Xtensa stand-in (figures in docs/benchmarks.md): tests/device/test_intkernels.py checks "
        "every kernel kind bit for bit",
    ".venv/bin/python tools/bench_xtensa.py --no-asm": "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime RT --kernels K --forward auto --rom --cache "
    "max_tokens=96,window=92,sinks=4 --context 55 --from 5 --tokens 1":
        "a benchmark per core, RT and K named in the table beside it (figures in docs/benchmarks.md): "
        "tests/host/test_runtimes.py runs the device files on each of those cores",
    ".venv/bin/python tools/bench_xtensa.py --tokens-only --profile":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime RT --kernels asm --forward auto --rom --cache "
    "max_tokens=96,window=92,sinks=4 --context 55 --from 5 --tokens 1":
        "a benchmark per core, RT named in the table beside it (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_parts.py --runtime m7 --rom --cache max_tokens=96,window=92,sinks=4 --context 26 "
    "--tokens 8":
        "a benchmark (figures in docs/benchmarks.md, ~2 min of emulated board): tests/device/test_att_v7m.py and "
        "test_q8_steps_v7m.py check its kernels bit for bit against plain on the M7",
    ".venv/bin/python tools/bench_prefill.py --runtime m3 --chunks 1 8 16 --heap 2097152":
        "a benchmark (figures in docs/benchmarks.md, ~30 s of emulated board): tests/device/test_pass_int_prefill.py "
        "holds the chunks' bits on every runtime",
    ".venv/bin/python tools/bench_forward.py --runtime m7 --macs --kernels asm viper --forward auto":
        "a benchmark (figures in docs/benchmarks.md): tests/host/test_dsp_kernels.py runs the "
        "DSP kernels' tests on the emulated Cortex-M7 and M55",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --macs --kernels asm --forward auto":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --macs --kernels asm viper --forward auto":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime m55 --rom --macs --kernels asm --forward auto":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --kernels asm viper --forward auto --unlocked --tokens 4":
        "a benchmark (figures in docs/benchmarks.md): the suite runs the forward passes' tests, not their timing",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --heap 215040 --march armv6m --rom --cache "
    "max_tokens=96,window=92,sinks=4 --forward auto --kernels asm viper --unlocked --tokens 4":
        "a benchmark (figures in docs/benchmarks.md), as the line above",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --heap 215040 --march armv6m --rom --kernels asm "
    "--forward auto --context 512 --tokens 4 --cache max_tokens=113,window=113":
        "a benchmark (figures in docs/tiered.md): tests/device/test_tier_cache_fused.py holds the tier's fused fold "
        "bit-identical to the tile loop on every runtime",
    ".venv/bin/python tools/bench_forward.py --runtime m3 --heap 215040 --march armv6m --rom --kernels asm "
    "--forward auto --context 512 --tokens 4 --cache max_tokens=20,window=16,sinks=4 --tier "
    "block=16,cold=i8,blocks=32":
        "a benchmark (figures in docs/tiered.md), as the line above",
    "tools/setup.sh && . .venv/bin/activate":
        "the set-up of the checkout the tests run in (tools/test runs tools/setup.sh first); the activation only "
        "puts .venv/bin on the shell's PATH, which this test's `kvedge` stands for",
    "tools/test": "the whole suite: the suite does not run itself (CI runs it: .ci/run)",
    ".venv/bin/python tools/fuzz.py --runtime unix --seed 7 --minutes 0.2 -k test_fuzz_tiered":
        "the fuzzers' longer runs: the suite runs the same fuzzers with fixed seeds (tests/device/test_fuzz_*.py)",
    "tools/demo": "runs tools/setup.sh, then `kvedge demo`: the demo is run by tests/host/test_demo.py and "
                  "tests/host/test_demo_boards.py",
    "mpremote connect PORT mip install github:OWNER/kvedge/device/kvedge-model.json":
        "needs the network and the project published on GitHub; tests/host/test_mip_parts.py installs the same "
        "package from a checkout on the unix port and the emulated board",
    "mpremote connect PORT mip install github:OWNER/kvedge":
        "needs the network and the project published on GitHub; the checkout form beside it installs the same "
        "package.json and runs here",
}

# ```python blocks that show calls over the reader's own data (a token stream, this token's K/V codes): they run
# against stand-ins. (page, first line) -> (prelude defining the names the block leaves to the reader, checks run
# after it). Absolute "/kv_cold..." paths (the board's flash) become files in the scratch folder.
_Q8 = ("from array import array\n"
       "kc, vc = array('b', range(-16, 16)), array('b', range(16, -16, -1))  # KV heads x head_dim int8 codes\n"
       "ks, vs = array('H', [0x2400] * 4), array('H', [0x2400] * 4)          # f16 scale bits per KV head\n"
       "qc, qs = array('b', [3] * 64), array('H', [0x2400] * 8)             # the query (within step_q8's Q8_RANGE)\n"
       "out_q, out_exp = array('i', [0] * 64), array('i', [0] * 8)\n")
_FLOATS = ("from array import array\nfrom kvedge.config import CacheConfig\n"
           "ks = [array('f', [0.5] * 32) for layer in range(5)]   # this token's K (and V) in every layer\n"
           "vs = [array('f', [0.25] * 32) for layer in range(5)]\n"
           "layer, q, out = 0, array('f', [0.25] * 64), array('f', [0.0] * 64)\n")
_POOL = (_FLOATS + "from kvedge.paged import PagedPool\n"
         "pool = PagedPool(CacheConfig(5, 8, 4, 8, 256, 'i8', align=0), block=16, sessions=8)\n"
         "sid = pool.open()\nfor t in range(40):\n    pool.append(sid, ks, vs)\n")
STANDINS = {
    ("README.md", "import json"):
        ("import subprocess, sys\n"
         "subprocess.run([sys.executable, '-m', 'kvedge_host.cli', 'plan', '--model', 'docs/examples/stories260K.json',"
         " '--board', 'rp2040', '--weights-dtype', 'i8', '--top', '3', '--out',"
         " 'kvedge_plan.json'],"
         " check=True, capture_output=True)\n",
         "from kvedge.config import CacheConfig\n"
         "doc = json.load(open('kvedge_plan.json'))\n"
         "tiered = type(cache).__name__ == 'TieredCache'  # a tiered plan's ring, staging block and tables\n"
         "want = doc['tier']['ram_bytes'] if tiered else CacheConfig.from_dict(doc['cache']).nbytes()\n"
         "assert cache.stats()['total_bytes'] == want > 0, (cache.stats(), want)\n"),
    ("docs/device-api.md", "from kvedge.cache import KVCache"):
        (_Q8 + "stream = range(200)\n",
         "assert cache.stats()['tokens_cached'] == 128 and cache.stats()['evictions'] == 72, cache.stats()\n"),
    ("docs/device-api.md", "from kvedge.paged import PagedPool"):
        (_FLOATS + "pinned = set()\n", ""),
    ("docs/device-api.md", "from kvedge.stream import Stream"):
        (_FLOATS + "from kvedge.cache import KVCache\n"
         "cache = KVCache(CacheConfig(5, 8, 4, 8, 64, 'f32', align=0))\nend_of_utterance = True\n",
         "st.append(ks, vs, marker=True)  # a marker: a reset point before this token\n"
         "assert '\"resets_marker\":1' in st.stats_json() and cache.stats()['tokens_cached'] == 1, st.stats_json()\n"),
    ("docs/device-api.md", "from kvedge.tier.spill import ColdTier"): (_POOL, ""),
    ("docs/device-api.md", "from kvedge.config import CacheConfig"):
        (_Q8 + "layer = 0\n", ""),
    ("docs/device-api.md", "from kvedge.telemetry import Telemetry"):
        ("from kvedge.config import CacheConfig\nfrom kvedge.cache import KVCache\n"
         "cache = KVCache(CacheConfig(5, 8, 4, 8, 64, 'i8', align=0))\nn = 3\n", ""),
    ("docs/device-api.md", "from kvedge import session"):
        ("from kvedge.model import tiny\n"
         "tiny.write_checkpoint('sess_m.bin', seed=5, dim=8, hidden_dim=16, n_heads=2, n_kv_heads=1, vocab_size=64)\n"
         "from kvedge.model.llama import Llama\nfrom kvedge.model.sampler import Sampler\n"
         "m = Llama('sess_m.bin', kv={'dtype': 'i8', 'max_tokens': 32, 'align': 0})\n"
         "sampler = Sampler(64, 0.9, 7)\ntok, steps, policy = None, 4, None\ncache = m.cache\n"
         "token = 5\nfor t in (1, 2, 3):\n    m.forward(t)\n",
         "assert cache.stats()['tokens_seen'] == 3 + steps, cache.stats()  # the fed token and 3 sampled\n"
         "assert session.load('chat', cache, None, sampler) == token\n"),
    ("docs/tiered.md", "from kvedge.config import CacheConfig"):
        (_Q8 + "stream = range(100)\n",
         "assert tc.stats()['cold_tokens'] > 0, tc.stats()\n"),
}

def rel(path):
    return os.path.relpath(path, ROOT)


def fences(text):
    """[(info words, body, line number)] of every fenced block."""
    return [(m.group(1).split(), m.group(2), text.count("\n", 0, m.start()) + 1) for m in FENCE.finditer(text)]


def lines_of(body):
    """The block's lines, continuations (a trailing backslash) joined, comment-only lines dropped."""
    out, cur = [], ""
    for line in body.splitlines():
        if line.rstrip().endswith("\\"):
            cur += line.rstrip()[:-1].rstrip() + " "
            continue
        line = (cur + line.strip()) if cur else line
        cur = ""
        if line.strip() and not line.strip().startswith("#"):
            out.append(line)
    return out


def strip_comment(line):
    """The command without its trailing `# comment` (a # outside quotes, after a space)."""
    quote = None
    for i, c in enumerate(line):
        if quote:
            quote = None if c == quote else quote
        elif c in "\"'":
            quote = c
        elif c == "#" and (i == 0 or line[i - 1].isspace()):
            return line[:i].strip()
    return line.strip()


def blocks(text):
    """[(mode, [(command, [expected substrings])], line)] of every fenced sh block that shows a command; a
    runnable block's ```output block (the next fence, only blank lines between) is its last command's expected
    substrings, which run_block checks against the output of all of the block's commands."""
    out = []
    found = fences(text)
    for i, (words, body, line) in enumerate(found):
        if words[:1] in (["python"], ["output"]):
            continue
        cmds = []
        # every block a reader pastes holds commands only (runnable, board and plain sh; a synopsis is a usage
        # line and its continuations)
        runnable = words[:1] == ["sh"] and words[1:] == ["runnable"]
        pasted = words[:1] == ["sh"] and words[1:] != ["synopsis"]
        for ln in lines_of(body):
            if COMMAND.match(ln.strip()):
                cmds.append((" ".join(strip_comment(ln.strip()).split()), []))
            elif runnable or pasted and cmds:
                raise ValueError("line %d: an output line in a ```%s block (pasted, it runs as a command): "
                                 "%r; put output in a ```output block after it" % (line, " ".join(words), ln.strip()))
            elif cmds:
                cmds[-1][1].append(ln.strip())
        if pasted and cmds and i + 1 < len(found) and found[i + 1][0][:1] == ["output"]:
            between = text.split("\n")[line + body.count("\n") + 1:found[i + 1][2] - 1]
            if all(not b.strip() for b in between):
                cmds[-1][1].extend(ln.strip() for ln in found[i + 1][1].splitlines() if ln.strip())
        if not cmds:
            continue
        if words[:1] != ["sh"] or len(words) > 2 or (words[1:] or [""])[0] not in MODES:
            raise ValueError("line %d: a block showing `%s` must be ```sh runnable|board|synopsis or ```sh"
                             % (line, cmds[0][0]))
        out.append(((words[1:] or [""])[0], cmds, line))
    return out


def python_blocks(text):
    return [(words[1:] == ["runnable"], body, line) for words, body, line in fences(text) if words[:1] == ["python"]]


def _collect():
    """{mode: [pytest.param(commands of one block)]}, [(page, runnable, body, line)], {command: page}."""
    found = {m: [] for m in MODES}
    pys, where = [], {}
    for page in PAGES:
        with open(page) as f:
            text = f.read()
        for mode, cmds, line in blocks(text):
            found[mode].append(pytest.param(cmds, id="%s:%d" % (rel(page), line)))
            for cmd, _ in cmds:
                where.setdefault(cmd, rel(page))
        for runnable, body, line in python_blocks(text):
            pys.append((rel(page), runnable, body, line))
    return found, pys, where


FOUND, PYTHON, WHERE = _collect()


# ---------------------------------------------------------------- the scratch folder and running a command

@pytest.fixture
def scratch(tmp_path_factory):
    """A folder whose entries link to the checkout's, with ../shared beside it: commands see the repository's
    paths, and the files they write stay here."""
    top = tmp_path_factory.mktemp("docs")
    repo = top / "repo"
    repo.mkdir()
    for name in os.listdir(ROOT):
        if name not in (".git", "tmp"):
            os.symlink(os.path.join(ROOT, name), str(repo / name))
    (repo / "tmp").mkdir()
    if os.path.isdir(SHARED):
        os.symlink(SHARED, str(top / "shared"))
    import _modelfiles
    _modelfiles.standin_fetch_cache(repo / "cache")  # _env's XDG_CACHE_HOME: without ../shared, a tokenizer known
    return str(repo)


def argv(cmd, scratch, port=None):
    """(environment additions, argv, file for stdout or None, background?) of a documented command line."""
    toks = shlex.split(cmd.replace("$USER", "user"))
    env = {}
    while toks and re.match(r"^[A-Z][A-Z0-9_]*=", toks[0]):
        k, v = toks.pop(0).split("=", 1)
        env[k] = v
    background = toks[-1] == "&"
    if background:
        toks.pop()
    out = None
    if ">" in toks:
        i = toks.index(">")
        out, toks = toks[i + 1], toks[:i]

    def sub(a):
        if port and a in PORTS:
            return port
        return re.sub(r"(^|=)/tmp/", lambda m: m.group(1) + os.path.join(scratch, "tmp") + "/", a)

    toks = [sub(a) for a in toks]
    out = sub(out) if out else None
    prog, rest = toks[0], toks[1:]
    if prog == "kvedge":
        run = [sys.executable, "-m", "kvedge_host.cli"] + rest
    elif prog == "mpremote":
        run = [venv_tool("mpremote")] + rest
    elif prog in (".venv/bin/python", "python", "python3"):
        run = [sys.executable] + rest
    elif prog == "pytest":
        run = [sys.executable, "-m", "pytest"] + rest
    elif prog.startswith("tools/") and prog.endswith(".py"):
        run = [sys.executable, prog] + rest
    else:
        raise AssertionError("%s: no rule to run %r" % (cmd, prog))
    return env, run, out, background


def _env(extra=(), scratch=None):
    env = dict(os.environ, COLUMNS="200", KVEDGE_SHARED=SHARED)
    if scratch:  # a virtual board's default filesystem (~/.cache/kvedge/sim/BOARD) starts empty, here
        env["XDG_CACHE_HOME"] = os.path.join(scratch, "cache")
    env["PYTHONPATH"] = os.pathsep.join([os.path.join(ROOT, "host"), os.path.join(ROOT, "device")] +
                                        [p for p in [env.get("PYTHONPATH")] if p])
    env.update(extra)
    return env


MODEL_USERS = ("kvedge generate", "kvedge eval", "tools/bench_model.py", "tools/bench_rom.py", "tools/bench_parts.py",
               "tools/bench_forward.py", "tools/bench_tiered.py", "tools/bench_chat.py")  # stories260K by default


def needs_shared(cmd):
    """Skip, saying why, a command whose model or board runtime (../shared) is absent here."""
    model = os.path.join(SHARED, "models", "stories260K.bin")
    if ("../shared" in cmd or any(u in cmd for u in MODEL_USERS)) and not os.path.exists(model):
        pytest.skip("needs %s (the shared models), absent here" % model)
    if re.search(r"--runtime m3\b", cmd) or "tools/bench_rom.py" in cmd:  # bench_rom runs on it only
        from kvedge_host.boards import m3board
        why = m3board.missing("rp2040")
        if why:
            pytest.skip("needs the emulated Cortex-M3: %s" % why)
    rt = re.search(r"--runtime ([\w-]+)", cmd)
    if rt:  # any other runtime a command names (the M0, M7, M55, the lx106: their firmware is in ../shared)
        from kvedge_host.boards import runtimes
        why = rt.group(1) in runtimes.RUNTIMES and runtimes.missing(rt.group(1))
        if why:
            pytest.skip("needs the %s runtime: %s" % (rt.group(1), why))


def run_documented(cmd, expected, scratch, port=None, timeout=300):
    env, run, out, background = argv(cmd, scratch, port)
    assert not background, "%s: only a board block's `kvedge sim ... &` runs in the background" % cmd
    p = subprocess.run(run, cwd=scratch, env=_env(env, scratch), capture_output=True, text=True, timeout=timeout)
    text = p.stdout + p.stderr
    assert p.returncode == 0, "%s\nexit %d\n%s" % (cmd, p.returncode, text[-3000:])
    if out:
        with open(os.path.join(scratch, out), "w") as f:
            f.write(p.stdout)
    check_expected(cmd, expected, text, scratch)
    return text


def check_expected(cmd, expected, text, scratch):
    """Each expected line (whitespace-insensitive, /tmp/ as the scratch folder's) is in text."""
    flat = " ".join(text.split())
    tmp = os.path.join(scratch, "tmp") + "/"
    for want in [re.sub(r"(^|[\s=])/tmp/", lambda m: m.group(1) + tmp, w) for w in expected]:
        assert " ".join(want.split()) in flat, "%s: %r not in its output:\n%s" % (cmd, want, text[-3000:])


# ---------------------------------------------------------------- the classification

def test_blocks_parse_commands_modes_and_expected_lines():
    text = ("x\n```sh runnable\nkvedge boards\n\nkvedge boards esp32   # a comment\n```\n\n```output\nrp2040\n"
            "esp32\n```\n```\nnot a command\n```\n```sh board\nmpremote connect PORT \\\n  exec 'x # y'\n```\n")
    assert blocks(text) == [("runnable", [("kvedge boards", []), ("kvedge boards esp32", ["rp2040", "esp32"])], 2),
                            ("board", [("mpremote connect PORT exec 'x # y'", [])], 15)]
    # an output block after prose is not the block's
    assert blocks("```sh runnable\nkvedge boards\n```\nprints\n```output\nrp2040\n```\n") == [
        ("runnable", [("kvedge boards", [])], 1)]
    for bad in ("```sh runnable\nstray\n```\n", "```sh runnable\nkvedge boards\nrp2040\n```\n",
                "```sh runnable\nkvedge boards\nrequested f32, keep all 512\nkvedge boards esp32\n```\n"):
        with pytest.raises(ValueError, match="output line in a ```sh runnable block"):
            blocks(bad)
    # a board block and a plain sh block are pasted too: output goes in the ```output block after them
    for bad, kind in (("```sh board\nkvedge test --port PORT\n0 failed, 0 skipped\n```\n", "sh board"),
                      ("```sh\nkvedge demo --plain\ndemo: plan vs board\n```\n", "sh")):
        with pytest.raises(ValueError, match="output line in a ```%s block" % kind):
            blocks(bad)
    assert blocks("```sh board\nkvedge test --port PORT\n```\n\n```output\n0 failed\n```\n") == [
        ("board", [("kvedge test --port PORT", ["0 failed"])], 1)]
    for bad in ("```\nkvedge boards\n```\n", "```bash\ntools/test\n```\n", "```sh maybe\nkvedge boards\n```\n"):
        with pytest.raises(ValueError):  # a command in a fence that does not say how it is run
            blocks(bad)


def test_every_command_block_says_how_it_is_run():
    for page in PAGES:
        with open(page) as f:
            text = f.read()
        blocks(text)  # raises on an unclassified fence
        nested = re.findall(r"^[ \t]+```.*$", text, re.M)
        assert nested == [], "%s: fences must start at the line's start (the test reads no others): %s" % (
            rel(page), nested)
        prose = FENCE.sub("", text)
        indented = INDENTED.findall(prose)
        assert indented == [], "%s: commands in an indented block (use a ```sh fence): %s" % (rel(page), indented)


def test_every_plain_sh_command_is_smaller_elsewhere_or_not_run_and_no_entry_is_stale():
    shown = [cmd for p in FOUND[""] for cmd, _ in p.values[0]]
    unlisted = [c for c in shown if sum(c in d for d in (SMALLER, ELSEWHERE, NOT_RUN)) != 1]
    assert unlisted == [], "commands in ```sh blocks must be in exactly one of SMALLER, ELSEWHERE, NOT_RUN: %s" \
        % unlisted
    stale = [c for d in (SMALLER, ELSEWHERE, NOT_RUN) for c in d if c not in shown]
    assert stale == [], "listed commands no page shows any more: %s" % stale
    pys = {(page, body.strip().splitlines()[0]) for page, runnable, body, _ in PYTHON if not runnable}
    assert pys == set(STANDINS), "```python blocks not run: without a stand-in %s, stale %s" % (
        sorted(pys - set(STANDINS)), sorted(set(STANDINS) - pys))


def test_the_docs_hold_commands_of_every_kind():
    # a page losing its blocks (or a fence's mode mistyped away) would otherwise pass silently
    count = {m: sum(len(p.values[0]) for p in FOUND[m]) for m in MODES}
    assert count["runnable"] >= 20 and count["board"] >= 5 and count["synopsis"] >= 4, count
    assert any(p.id.startswith("README.md:") for p in FOUND["runnable"])


# ---------------------------------------------------------------- running them

@pytest.mark.parametrize("cmds", FOUND["runnable"])
def test_documented_commands_run(cmds, scratch):
    for cmd, _ in cmds:
        needs_shared(cmd)
    text = ""
    for cmd, expected in cmds:  # in order: a block's later commands may use what the earlier ones wrote
        text += run_documented(cmd, [], scratch)
        check_expected(cmd, expected, text, scratch)


def program(cmd):
    """What a command runs: `kvedge SUB`, the script, or `-m MODULE`."""
    toks = [t for t in shlex.split(cmd) if not re.match(r"^[A-Z][A-Z0-9_]*=", t)]
    if toks[0] == "kvedge":
        return toks[:2]
    if toks[0] in (".venv/bin/python", "python", "python3"):
        return toks[1:3] if toks[1] == "-m" else toks[1:2]
    return toks[:1]


def _id(cmd):
    return cmd.replace("tests/device/", "tests.device.")  # the closing summary counts ids holding tests/device/


@pytest.mark.parametrize("cmd", sorted(SMALLER), ids=_id)
def test_slow_command_runs_smaller(cmd, scratch):
    small, why = SMALLER[cmd]
    needs_shared(small)
    assert program(small) == program(cmd), "%s must run the same program as %s" % (small, cmd)
    run_documented(small, [], scratch, timeout=600)


@pytest.mark.parametrize("cmd", sorted(ELSEWHERE))
def test_command_run_elsewhere_is_in_that_test(cmd):
    path, name, _ = ELSEWHERE[cmd][:3]
    params = ELSEWHERE[cmd][3] if len(ELSEWHERE[cmd]) > 3 else {}  # token -> the parametrization supplying it
    src = open(os.path.join(ROOT, path)).read()
    m = re.search(r"^def %s\(.*?(?=^\S)" % re.escape(name), src + "\nEND", re.M | re.S)
    assert m, "%s has no test %s" % (path, name)
    if os.path.basename(WHERE[cmd]) in src:
        return  # the test reads its commands from the page itself
    from kvedge_host import profiles
    for token, expr in params.items():
        assert expr in src and token in eval(expr, {"profiles": profiles}), (path, token, expr)
    missing = [t for t in shlex.split(cmd)[1:]
               if '"%s"' % t not in src and "'%s'" % t not in src and t not in params]
    assert missing == [], "%s::%s does not run %r: %s not in it" % (path, name, cmd, missing)


@pytest.mark.parametrize("cmds", FOUND["synopsis"])
def test_synopsis_shows_only_real_options(cmds):
    for cmd, expected in cmds:
        check_synopsis(cmd, expected)


def _options(prog):
    """{option string: argparse action} of `kvedge SUB` (in process) or of a tools/ script (from its --help)."""
    if prog[0] == "kvedge":
        from kvedge_host import cli
        subs = cli.build_parser()._subparsers._group_actions[0].choices
        assert prog[1] in subs, "kvedge has no command %r" % prog[1]
        return subs[prog[1]]._option_string_actions
    path = os.path.join(ROOT, prog[0])
    assert os.path.exists(path), "no script %s" % prog[0]
    p = subprocess.run([sys.executable, path, "--help"], capture_output=True, text=True, env=_env(), timeout=120)
    assert p.returncode == 0, p.stderr
    return {o: None for o in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", p.stdout)}


def check_synopsis(cmd, expected, options=None):
    words = cmd.split()
    assert words[0] == "kvedge", cmd
    options = options if options is not None else _options(words[:2])
    text = " ".join([cmd] + expected)
    for opt in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", text):
        assert opt in options, "%s: kvedge %s has no option %s" % (cmd, words[1], opt)
    for opt, alts in re.findall(r"(--[\w-]+) ([\w.-]+(?:\|[\w.-]+)+)", text):
        choices = options[opt].choices
        assert choices and set(alts.split("|")) <= set(choices), "%s: %s takes %s" % (cmd, opt, choices)


INLINE = re.compile(r"`((?:[A-Z][A-Z0-9_]*=\S+ )*(?:kvedge [a-z]+|(?:\.venv/bin/python )?tools/[\w/]+\.py)(?: [^`]*)?)`")


def inline_commands():
    """{(program words): [(page, command)]} of the commands quoted in the pages' prose (`kvedge plan --top 3`)."""
    out = {}
    for page in PAGES:
        with open(page) as f:
            text = FENCE.sub("", f.read())
        for cmd in INLINE.findall(" ".join(text.split())):
            words = [w for w in cmd.split() if not re.match(r"^[A-Z][A-Z0-9_]*=", w) and w != ".venv/bin/python"]
            prog = tuple(words[:2]) if words[0] == "kvedge" else (words[0],)
            out.setdefault(prog, []).append((rel(page), cmd))
    return out


def test_commands_quoted_in_prose_name_real_commands_and_options():
    """Prose quotes commands too (`kvedge plan --board all --quality`): each names a command or script that
    exists and only options it accepts (and choices among its choices)."""
    found = inline_commands()
    assert len(found) >= 10
    bad = []
    for prog, uses in sorted(found.items()):
        options = _options(list(prog))
        for page, cmd in uses:
            if prog[0] == "kvedge":
                try:
                    check_synopsis(cmd, [], options)
                except AssertionError as e:
                    bad.append("%s: %s" % (page, e))
            else:
                bad += ["%s: `%s`: %s has no option %s" % (page, cmd, prog[0], o)
                        for o in re.findall(r"(?<![\w-])(--?[a-zA-Z][\w-]*)", cmd) if o not in options]
    assert bad == [], "\n".join(bad)


@pytest.mark.parametrize("code", [pytest.param(body, id="%s:%d" % (page, line))
                                  for page, runnable, body, line in PYTHON if runnable])
def test_documented_python_runs(code, scratch):
    p = subprocess.run([sys.executable, "-c", code], cwd=scratch, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, "exit %d\n%s" % (p.returncode, (p.stdout + p.stderr)[-3000:])


@pytest.mark.parametrize("key", sorted(STANDINS), ids=lambda k: "%s:%s" % k)
def test_documented_python_runs_on_stand_ins(key, scratch):
    """A block over the reader's own data, run after a prelude that defines that data, then checked."""
    prelude, checks = STANDINS[key]
    body = [b for page, runnable, b, _ in PYTHON if (page, b.strip().splitlines()[0]) == key][0]
    body = re.sub(r"([\"'])/kv_cold", r"\1kv_cold", body)
    # the reader's own folder has no cold store of another layout: one an earlier block (or a tiered generate on
    # the host) left in the shared scratch folder would be refused, rightly, as written for another layout
    for name in os.listdir(scratch):
        if name.startswith("kv_cold."):
            os.unlink(os.path.join(scratch, name))
    code = prelude + body + checks
    p = subprocess.run([sys.executable, "-c", code], cwd=scratch, env=_env(), capture_output=True, text=True,
                       timeout=300)
    assert p.returncode == 0, "exit %d\n%s\n%s" % (p.returncode, code, (p.stdout + p.stderr)[-3000:])


def test_board_blocks_run_on_one_virtual_board(scratch):
    """Every ```sh board command, in page order, against the board the docs' own `kvedge sim ... &` starts."""
    cmds = [c for p in FOUND["board"] for c in p.values[0]]
    starts = [c for c, _ in cmds if c.startswith("kvedge sim ") and c.endswith("&")]
    assert len(starts) == 1, "the board blocks start exactly one board (`kvedge sim ... &`): %s" % starts
    env, run, _, _ = argv(starts[0], scratch)
    link = run[run.index("--link") + 1]
    sim = subprocess.Popen(run, cwd=scratch, env=_env(env, scratch), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)
    try:
        end = time.monotonic() + 120
        while not os.path.exists(link):
            assert sim.poll() is None and time.monotonic() < end, "%s did not start:\n%s" % (
                starts[0], sim.stderr.read().decode() if sim.poll() is not None else "timeout")
            time.sleep(0.2)
        for cmd, expected in cmds:
            if cmd != starts[0]:
                run_documented(cmd, expected, scratch, port=link, timeout=600)
    finally:
        os.killpg(sim.pid, signal.SIGTERM)
        try:
            sim.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(sim.pid, signal.SIGKILL)
            sim.wait(10)


# ---------------------------------------------------------------- links

def anchors(path):
    """The #fragments a page's headings get (GitHub's rule: lower case, punctuation dropped, spaces -> hyphens)."""
    with open(path) as f:
        text = FENCE.sub("", f.read())
    return {re.sub(r"[^\w\- ]", "", h.strip().lower()).replace(" ", "-") for h in re.findall(r"^#+ (.*)$", text, re.M)}


def test_anchors_follow_githubs_rule():
    assert "the-forward-passes-integer-float-and-ulab-issue-13" in \
        anchors(os.path.join(ROOT, "docs", "benchmarks.md"))  # "## The forward passes: integer, float and ulab (issue 13)"


@pytest.mark.parametrize("page", PAGES, ids=rel)
def test_relative_links_point_to_existing_files(page):
    with open(page) as f:
        text = f.read()
    text = re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)  # code blocks hold no links
    missing = []
    for target in LINK.findall(text):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target):
            continue  # a URL
        path, _, frag = target.partition("#")
        full = os.path.join(os.path.dirname(page), path) if path else page
        if not os.path.exists(full):
            missing.append(target)
        elif frag and full.endswith(".md") and frag not in anchors(full):
            missing.append(target)  # a heading renamed away
    assert missing == [], "%s links to missing files or headings: %s" % (rel(page), missing)
