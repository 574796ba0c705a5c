"""``owx bench thorn``: THORN's failover, throughput and reconciler."""
