"""What the scheduler knows of the node and the rules it keeps on it: the settings and the GPU
registry (the one bridge to the policy), the connections' bounds and identities, who is an admin,
quotas and jobs, and the counters the exporter shows. It imports the policy, never the rooms above it
(control, exporter, shell)."""
