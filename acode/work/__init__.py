"""Work sessions: AI engines (Claude Code, Codex, Aider, acode's own loop, any command)
driven on tasks kept in the repository, with their own resume tokens, subtasks,
breadcrumbs and cookies (docs/work-sessions.md)."""

__all__: list[str] = []
