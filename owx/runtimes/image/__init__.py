"""Container images of the action runtimes, built locally without a registry."""
