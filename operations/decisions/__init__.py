"""Human decisions on cards: the bounded options (pure), the card a decision is checked against, and the
decision services that check a posted option and apply it through the lifecycle."""
