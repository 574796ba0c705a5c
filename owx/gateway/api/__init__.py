"""REST API blueprints, one per resource (OpenWhisk's ``/api/v1`` routes)."""
