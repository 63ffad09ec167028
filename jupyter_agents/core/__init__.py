"""The core: what every other wing stands on, and nothing of theirs.

The session store (the only owner of ``sessions.db``), the events it publishes, the
errors every layer raises (each with its HTTP status), the state dir's paths, process
identity (pid and start time), how a child process is launched, where the package came
from, and request parsing (bad input as a 400 naming the argument). Imports nothing
else of the package.
"""
