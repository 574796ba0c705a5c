"""``owx bench disdel``: DiSDeL's estimates, job time and loss."""
