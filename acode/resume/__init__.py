"""resume layer."""
