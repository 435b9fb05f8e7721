"""acode: crash-proof AI coding-agent sessions."""
