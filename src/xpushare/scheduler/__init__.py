"""nvshare-scheduler: a pure policy core (policy.py) behind an asyncio Unix-socket server (server.py)."""
