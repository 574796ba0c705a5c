"""Datapath drivers: turn desired forwarding rules into kernel state (tc flower, tc u32, bridge FDB)."""
