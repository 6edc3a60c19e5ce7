"""kvedge host tools (CPython): budgets and plans, runtimes, deployment, monitoring, cross-checks."""
from kvedge import __version__  # noqa: F401  (one version for both halves)
