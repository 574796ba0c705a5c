"""The platform on this machine: nodes of container pools, their backends and containers."""
