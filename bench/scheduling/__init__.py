"""The scheduler's decisions and its loop: lock latency, makespans, interactive waits, idle
release, load, burst registration, status under load, the soak."""
