# kvedge on a CircuitPython board (copied to CIRCUITPY by `kvedge deploy --drive`): generates with the cache of
# kvedge_plan.json and the options of settings.toml (KVEDGE_PROMPT, KVEDGE_STEPS, KVEDGE_TEMPERATURE, KVEDGE_SEED,
# KVEDGE_STATS_MS, KVEDGE_MODEL, KVEDGE_TOKENIZER). The text and the KVSTATS lines go to the serial console,
# where `kvedge monitor --port PORT` reads them. The package is in lib/kvedge.
from kvedge.model import runplan

runplan.from_settings()
