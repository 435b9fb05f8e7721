"""The outside world as acode uses it: files beneath the workspace, git commits and
snapshots, processes, locks, the model's HTTP client, the clock and the log. Imports
nothing of the engine."""
