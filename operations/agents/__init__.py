"""The agents' side: their identities, registration checked whole, what they do to their operations,
job ids."""
