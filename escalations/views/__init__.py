"""Dashboard views (the human layer): cards and the inbox, history, operations, the system panel."""
