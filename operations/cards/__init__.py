"""What the lifecycle needs of a card: the card and its loader, its bounded options (pure),
their words, the sign-in a decision records."""
