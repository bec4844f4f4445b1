"""The collection's defaults, in a module that imports nothing, so that the command line shows
them (and `datagen stats`, `compact` or `--help` run) without importing TVM and torch."""

DEFAULT_PER_WORKLOAD = 32
DEFAULT_BATCH_SIZE = 16
DEFAULT_EVOLVE_FRACTION = 0.5
# a candidate whose repeats spread more than this is measured again at the end of its round
DEFAULT_RETRY_CV = 0.10
DEFAULT_PROTOCOL = {"warmup": 1, "repeat": 5, "number": 1, "min_repeat_ms": 20}
# single runs, the CPU caches flushed of every argument but the first before each: a kernel
# meets its weights cold, as it does inside a network (Ansor's advice for tuning networks)
COLD_PROTOCOL = {"warmup": 1, "repeat": 10, "number": 1, "min_repeat_ms": 0, "cache_flush": True}
DEFAULT_RUN_TIMEOUT_SEC = 10.0
DEFAULT_BUILD_TIMEOUT_SEC = 10.0
