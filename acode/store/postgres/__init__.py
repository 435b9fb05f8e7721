"""The PostgreSQL store (issue 22): ``store.url: postgresql://...`` makes it the session
store. Imported only when such a URL is opened: nothing else of acode loads psycopg but
the remote mirror (acode/sync)."""
