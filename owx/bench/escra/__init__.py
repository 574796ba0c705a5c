"""``owx bench escra``: Escra's allocator against static limits."""
