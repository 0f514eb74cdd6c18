"""Providers: their requests, credentials, where a request may go, a provider cancel, the start-up check."""
