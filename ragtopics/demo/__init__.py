"""Demo links: one Topic's chat, reachable without login by whoever holds the link (:mod:`ragtopics.demo.links`)."""
