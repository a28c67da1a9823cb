"""Background jobs as the rest of the product sees them: enqueueing, the jobs of a Topic, progress.

The worker process that runs them, and the job functions themselves, are :mod:`ragtopics.worker`.
"""
