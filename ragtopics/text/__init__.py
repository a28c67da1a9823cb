"""Text shared by every layer: the file types the product reads and the keyword analysis of the chunk index."""
