"""``owx bench canary``: Canary's recovery, makespan and checkpoint figures."""
