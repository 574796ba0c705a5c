"""Action runtimes: OpenWhisk's runtime protocol for Python, as a process and as images.

``python_action`` is the entry point (stdlib only, also what the images run);
``protocol`` answers ``/init`` and ``/run``; ``http_wire`` is its small HTTP/1.1
server; ``action_loader`` turns code into a callable; ``activation_env`` holds
the ``__OW_*`` variables per activation; ``image`` builds the container images.
The proxy modules (all but ``cli`` and ``image``) use only the standard library
and each other: they run in images that have nothing else.
"""
