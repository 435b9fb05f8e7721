"""A fleet of workers: sessions queued in PostgreSQL (`acode queue`), claimed, run in a
scratch clone and pushed as a branch by `acode worker` on any number of machines
(docs/fleet.md). psycopg is imported here only inside functions."""
