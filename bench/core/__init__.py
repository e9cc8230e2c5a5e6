"""What every benchmark shares: the process harness and GPU safety check, a Python with PyTorch,
statistics, rendering and the report, the suite's registry, the memory arithmetic of admission, a
production-configured scheduler, a protocol client and load generator, log readers, GPU clocks,
the loop watch."""
