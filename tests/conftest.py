from tests.fixtures.couchdb import couchdb_url  # noqa: F401  (session fixture: a CouchDB-API server)
