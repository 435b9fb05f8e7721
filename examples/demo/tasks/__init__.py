"""Python steps of the demo plan (`python: tasks.checks:inventory`)."""
