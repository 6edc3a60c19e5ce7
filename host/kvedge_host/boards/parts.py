"""The device package in parts a board installs alone, micropython-lib style: a core (formulas, config, the cache)
and optional parts, each with the parts it requires. `tools/gen_package_json.py` writes one mip package per part,
`device/kvedge-PART.json`, listing the part's files and those of every part it requires (so each installs alone,
from a clone or from GitHub: `mpremote mip install github:OWNER/kvedge/device/kvedge-core.json`), beside the
whole package in ./package.json. Every device file belongs to exactly one part, and a part's modules import at
their top only modules of the parts it requires (tests/host/test_mip_parts.py)."""
import os

from . import deploy
from ..paths import DEVICE

# name: (what it is, the parts it requires, its modules as board paths under kvedge/)
PARTS = {
    "core": ("exact memory formulas, cache configuration, the KV cache in one arena (f32/f16/i8/i4/i2, window, "
             "sinks, prefix, KIVI's residual; K and V in formats of their own)", (),
             ("__init__", "errors", "sizes", "config", "compat", "check", "quant", "budget", "cache", "q8writes", "kivi",
              "kvsplit", "w4sizes",
              "poolsizes", "tier/__init__", "tier/sizes")),
    "kernels": ("the kernel selector and the plain, native and viper kernels", ("core",),
                ("kernels/__init__", "kernels/plain", "kernels/native", "kernels/f32_native", "kernels/viper",
                 "kernels/viper_head", "kernels/words",
                 "kernels/q8_plain", "kernels/q8_native", "kernels/q8_viper", "kernels/q4_plain",
                 "kernels/q4_native", "kernels/q4_viper", "kernels/cpuid")),
    "kernels-arm": ("the Thumb inline-assembler kernels (Arm chips only; DSP ones for Armv7E-M cores)", ("kernels",),
                    tuple(p[len("kvedge/"):-len(".py")] for p in deploy.THUMB_ONLY)),
    "kernels-xtensa": ("the Xtensa inline-assembler kernels (call0 Xtensa chips: the ESP8266)", ("kernels",),
                       tuple(p[len("kvedge/"):-len(".py")] for p in deploy.XTENSA_ONLY)),
    "attention": ("tiled online-softmax attention on the cache: float and integer paths", ("core", "kernels"),
                  ("floatatt", "attention", "cacheq8", "q8rows", "q8prefix", "caches")),
    "evict": ("heavy-hitter (H2O) eviction", ("core",), ("evict",)),
    "stream": ("token streaming into the cache", ("core",), ("stream",)),
    "telemetry": ("the stats stream a host monitors over serial", ("core",), ("telemetry",)),
    "session": ("a conversation saved to flash and resumed bit for bit (the cache, its policy, the sampler)",
                ("core",), ("session",)),
    "pool": ("paged sessions: one arena shared by many conversations, shared prompts held once, a session as a "
             "model's cache", ("core", "attention"), ("paged", "pooled")),
    "rules": ("the rules a plan and a run are checked by: which forward pass runs a model, a tier's fields",
              ("kernels",), ("model/__init__", "model/passes", "tier/config")),
    "tier": ("the flash tier: a tiered cache (hot ring, cold blocks on flash) and the pool's cold tier",
             ("core", "attention", "pool", "rules"), ("tier/store", "tier/cache", "tier/spill", "kernels/viper_tier")),
    "model": ("the llama2.c-style model runner on the cache (checkpoints, forward passes, tokenizer, sampler, plans)",
              ("core", "kernels", "attention", "rules"),
              ("model/bpe", "model/checkpoint", "model/convert", "model/convert4", "model/f32file", "model/header",
               "model/llama", "model/pass_float", "model/pass_int", "model/pass_int4", "model/pass_ulab", "model/pieces",
               "model/plandoc",
               "model/prefill", "model/romweights", "model/run", "model/runplan", "model/runpool", "model/sampler", "model/sizes",
               "model/tiny", "model/tokenizer", "model/w4file")),
    "chat": ("turns of a conversation on one cache (kvedge chat): each line fed on top of what the cache holds",
             ("model",), ("chat",)),
}
# what a part loads only when a run asks for it (or its port has it): the model runner: H2O eviction, the stats
# stream, a tier, a saved session (generate --save/--resume); the attention's cache builder: a tier (kvedge.caches);
# a pool plan's run: the pool (kvedge.model.runpool); the kernels: the Xtensa inline assembler's (kvedge.kernels.q8_viper probes for them); a session: the cache
# builder, to reopen a tier's store (kvedge.session.reopen_tier, for the runner); a chat: H2O, the stats stream and
# a saved conversation (kvedge chat --h2o, --stats-ms, --save/--resume)
OPTIONAL = {"model": ("evict", "telemetry", "tier", "kernels-arm", "session", "pool"), "attention": ("tier",),
            "kernels": ("kernels-xtensa",), "session": ("attention",), "chat": ("evict", "telemetry", "session")}


def closure(name):
    """The part and every part it requires, each once, required parts first."""
    out = []

    def walk(n):
        if n not in PARTS:
            raise KeyError("no part %r (parts: %s)" % (n, ", ".join(PARTS)))
        for r in PARTS[n][1]:
            walk(r)
        if n not in out:
            out.append(n)
    walk(name)
    return out


def files(name):
    """Board paths (kvedge/...py) of the part with everything it requires."""
    return ["kvedge/%s.py" % m for p in closure(name) for m in PARTS[p][2]]


def package_path(name):
    return os.path.join(DEVICE, "kvedge-%s.json" % name)


def package(name, version):
    """The part's mip package (device/kvedge-NAME.json): URLs relative to device/, where it lives."""
    return {"urls": [[f, f] for f in files(name)], "deps": [], "version": version}


def unowned():
    """Device files in no part, and files in more than one."""
    owned = ["kvedge/%s.py" % m for p in PARTS for m in PARTS[p][2]]
    every = [remote for _, remote in deploy.device_sources()]
    return sorted(set(every) - set(owned)), sorted(f for f in set(owned) if owned.count(f) > 1)
