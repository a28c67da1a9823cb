"""Text helpers shared by every layer: the file types the product reads, the keyword analysis of the chunk
index, and bounded copies of values for storing and showing (:mod:`ragtopics.text.clip`)."""
