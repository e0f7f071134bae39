"""General I/O: what users name as inputs (`inputs`: checked opens, .npy/.npz, sizes), the one writer of outputs
(`outputs`), lock files (`locks`) and output formats (`prom`: Prometheus textfiles). Never a read of the observed
system: that is `edge_runtime.system`. Imports nothing, so `import edge_runtime` pays for none of it."""
