"""Pure decision code: no I/O, no clock, no randomness of its own.

Everything here takes `now` and an `rng` as arguments, so every rule of docs/DESIGN.md sections 4-5 is
a plain unit test.
"""
