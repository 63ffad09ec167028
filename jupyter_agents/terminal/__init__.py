"""Terminal bytes: what a pty wrote, as data. No processes, no server.

A VT parser of the modes and screen a client must get back (``vt``), the transcript
files and their segments, the terminal state a reconnect replays (``state``), and
rendering a transcript as text or HTML (``render``). Stands on the core only.
"""
