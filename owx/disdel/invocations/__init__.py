"""DiSDeL's estimation for every invocation (opt-in): an action annotated
``{"key": "disdel", "value": {"memory": "auto", "timeout": "auto"}}`` runs with limits learned from
its own activations, and one that fails for the limit it was given is raised and run once more."""
