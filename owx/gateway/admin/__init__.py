"""Administration of one owx instance, as ``wskadmin`` does it for OpenWhisk: ``owx admin user ...``."""
