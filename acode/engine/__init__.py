"""The session engine: sessions, their journal and history, steps, replay, approvals,
the plan runner, the progress file."""
