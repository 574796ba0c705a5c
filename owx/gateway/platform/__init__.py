"""The embedded platform: action containers (backends), their pools, and nodes."""
