"""A tiny login module: the code the demo session changes."""

USERS = {"alice": "Alice Liddell", "bob": "Bob Dylan"}


def login(user):
    """Return a greeting for a known user."""
    name = USERS.get(user)
    if name is None:
        raise KeyError(f"unknown user: {user}")
    return f"Welcome, {name}!"
