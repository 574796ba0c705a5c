"""``owx bench invoke``: the gateway's overhead, warm throughput and cold starts."""
