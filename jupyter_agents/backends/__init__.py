"""Terminal backends: processes that own the ptys so they outlive the Jupyter server."""

from .base import Backend, LiveSession, SpawnRequest, Stream, StreamListener

__all__ = ["Backend", "LiveSession", "SpawnRequest", "Stream", "StreamListener"]
