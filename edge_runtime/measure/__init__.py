"""Measurement: the timing loop, statistics, interference counters, co-runners, platform latency, and `run_bench`,
which puts them together for one model on pinned CPUs.

Layer: imports runtime, system and errors; never quantize or cli (the command line renders what this returns).
"""
