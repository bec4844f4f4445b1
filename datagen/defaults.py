"""The collection's defaults, in a module that imports nothing, so that the command line shows
them (and `datagen stats`, `compact` or `--help` run) without importing TVM and torch."""

DEFAULT_PER_WORKLOAD = 32
DEFAULT_BATCH_SIZE = 16
DEFAULT_EVOLVE_FRACTION = 0.5
# a candidate whose repeats spread more than this is measured again at the end of its round
DEFAULT_RETRY_CV = 0.10
DEFAULT_PROTOCOL = {"warmup": 1, "repeat": 5, "number": 1, "min_repeat_ms": 20}
DEFAULT_RUN_TIMEOUT_SEC = 10.0
DEFAULT_BUILD_TIMEOUT_SEC = 10.0
