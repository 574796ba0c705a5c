"""owx: OpenWhisk extended for long-running, stateful, resource-hungry functions."""
