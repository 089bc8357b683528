"""The text and its tokens: the corpus with its manifest, the byte-level BPE and the token arrays."""
