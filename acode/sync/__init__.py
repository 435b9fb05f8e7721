"""sync layer: the remote PostgreSQL mirror, pushed in the background."""
