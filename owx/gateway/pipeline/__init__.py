"""The invocation pipeline: admission, execution on the platform, activation records."""
