"""Domain logic of ragtopics: settings, reading, chunking, embedding, the model gateway, retrieval and answering."""
