"""The scores, one file each: pure functions over a likelihood backend (IFD, perplexity, information
parity, excess loss, the entropy scores, MIWV) and over its embeddings (similarity, token selection)."""
