"""What every command-line program of the house is made of, edge-runtime's and edge-bench's alike: `main`
(run_program, the one mapping of errors to one line and an exit code), `args` (the parser, bounded types, the options
declared once, the outputs' check), `signals` (how a command ends on a signal). Nothing here is imported by
`import edge_runtime`."""
