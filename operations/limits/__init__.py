"""Limits the lifecycle charges: per-account pacing, per-agent quotas, the rate-limit counters behind them."""
