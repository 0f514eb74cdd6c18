"""Dashboard reads: cards, the inbox, the decision history, operations. Nothing here writes.

Each list runs a fixed number of queries whatever the number of rows (select_related and one
aggregate per list), so the pages stay fast with thousands of open cards and operations.
"""
