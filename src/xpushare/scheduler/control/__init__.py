"""nvsharectl's operations and what they show: the control ops, status built and sent a slice at a
time, and placement. It reads the node room; the shell hands it requests."""
