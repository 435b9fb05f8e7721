"""The store: its contract (base.py), the rows it hands out (records.py), and its backends."""
