"""``owx bench upstream``: what owx in front of an OpenWhisk adds to each invocation."""
