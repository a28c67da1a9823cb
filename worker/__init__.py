"""RQ job functions, enqueue helpers and worker start-up."""
