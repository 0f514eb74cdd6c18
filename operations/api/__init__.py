"""The agent-facing doors: the JSON API under /api/v1/ (routes), its parsing and problem documents, the
bounded wait and SSE, and the MCP server. Every door calls the same domain services and selectors."""
