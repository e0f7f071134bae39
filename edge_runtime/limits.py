"""The bounds every entry point checks numbers against (flags, requests from a host, `load()` arguments), in one
module that imports nothing, so the command line can declare its flags without importing numpy or a backend."""

MAX_THREADS = 1024  # more inference threads than any board has cores, by far
MAX_WARMUP = 50_000_000  # untimed calls; use warmup_s for long warm-ups
MAX_WARMUP_S = 3600.0
MAX_DURATION_S = 7 * 86400.0  # a longer soak is a campaign of runs; one run keeps at most 50 M samples anyway
MAX_SEED = 2**64 - 1
