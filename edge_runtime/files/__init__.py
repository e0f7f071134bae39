"""General I/O: what users name as inputs (`inputs`: checked opens, .npy/.npz, sizes), the one writer of outputs
(`outputs`), lock files (`locks`), output formats (`prom`: Prometheus textfiles) and the TOML files users write, read
with their validators (`toml`: board profiles and campaigns). Never a read of the observed system: that is
`edge_runtime.system`. Imports nothing, so `import edge_runtime` pays for none of it."""
