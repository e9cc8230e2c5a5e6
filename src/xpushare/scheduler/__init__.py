"""nvshare-scheduler: a pure policy core (policy/) behind an asyncio Unix-socket shell (server.py and
the modules it serves with); docs/architecture.md maps them."""
