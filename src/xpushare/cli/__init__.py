"""The command-line tools: nvsharectl (ctl, its status tables and live view) and nvshare-run
(run, run_gpus), with the blocking client side of the scheduler socket they share (client).
They depend on the contract (xpushare.wire), never on the scheduler or the Kubernetes code."""
