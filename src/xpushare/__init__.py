"""XPUShare: transparent GPU sharing (libnvshare.so + nvshare-scheduler)."""

__version__ = "0.1.0"
