"""Per-op placement and time, one module per engine (issue 29): which op ran where (a delegate, an execution
provider, a device's kernels), what fell back to the CPU, and what each op cost where the engine can say.

Layer: imports runtime and errors; never cli (the command line renders what this returns).
"""
