"""What a reader sees: the gathered tables, the figures and the claims table."""
