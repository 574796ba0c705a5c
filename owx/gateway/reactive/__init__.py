"""Triggers and rules, as OpenWhisk has them: a trigger names an event, a rule connects it to an
action, firing a trigger activates the actions of its active rules and records what it did."""
