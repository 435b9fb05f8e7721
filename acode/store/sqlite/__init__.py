"""The SQLite store backend: its connection set-up, migrations, row layout and SQL."""
