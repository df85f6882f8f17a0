"""Threads and I/O only: child sessions, session sockets, recordings, the /metrics poller, file
followers; they hand records and events (``events``) to a feed. No Textual or Rich import."""
