# kvedge: KV-cache memory planning and management for small transformers on microcontrollers.
# Kept tiny on purpose: import the module you need (kvedge.budget, kvedge.cache, ...) so a board only
# pays RAM for what it uses.
__version__ = "0.1.0"
