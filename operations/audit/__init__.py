"""The audit log: the single writer (entries), signed checkpoints, exports, the offline verifier and the
human-readable story. Kept free of imports: `operations.audit.verify` must load without Django."""
