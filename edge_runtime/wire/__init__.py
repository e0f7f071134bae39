"""The wire protocol between the host and a board's agent, sans-I/O (no port, no socket in here; the agent and the
host's transports do the I/O): `cobs` and `frame` cut a byte stream into checked frames, `link` makes them a reliable
ordered message channel (go-back-N ARQ), `messages` is what the agent and host say over it, `endpoint` parses
where they meet (an address, the token file).
"""
