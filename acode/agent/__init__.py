"""The agent loop's parts: the plan a model submits, the tools it calls, the conversation.

The modules here are imported by name (``acode.agent.plan_schema`` and so on); the package
itself imports nothing, so importing it stays free.
"""

__all__ = []
