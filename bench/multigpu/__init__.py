"""Jobs across GPUs: gang-scheduled torchrun DDP."""
