"""What every layer uses: plain SQL, the task queue's broker, the one outbound HTTP module,
the secret scrubber, locks."""
