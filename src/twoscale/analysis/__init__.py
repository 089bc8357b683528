"""What the loops do: the geometry of the loop iterates, phases of depth, and one checkpoint's measurement."""
