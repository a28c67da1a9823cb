"""Everything that touches a store: the embedded Redis, RediSearch indexes, SQL metadata and blobs."""
