"""Feeds owx provides itself: ``/whisk.system/alarms/{alarm,once,interval}`` (OpenWhisk's alarms package),
served by a scheduler inside the gateway instead of an external provider service."""
