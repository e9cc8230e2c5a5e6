"""What the scheduler reports: per-client GPU time against the kernels' native time, the metrics
endpoint under abuse."""
