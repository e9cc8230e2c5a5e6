#!/usr/bin/env python3
"""A stand-in for `nvidia-smi --query-gpu=timestamp,clocks.sm,power.draw,utilization.gpu
--format=csv,noheader,nounits -lms 50`: the same lines, every 20 ms, with $FAKE_SM_MHZ (default
1755), 512.5 W and 100 %, and a message line first (the sampler skips what is not a sample)."""

import datetime
import os
import time

print("Some message that is not a sample", flush=True)
while True:
    stamp = datetime.datetime.now().strftime("%Y/%m/%d %H:%M:%S.%f")[:-3]
    print(f"{stamp}, {os.environ.get('FAKE_SM_MHZ', '1755')}, 512.50, 100", flush=True)
    time.sleep(0.02)
