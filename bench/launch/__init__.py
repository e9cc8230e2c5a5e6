"""What the library adds to a kernel launch and to a training step."""
